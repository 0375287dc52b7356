"""What each of several runs is called where they are shown together (compare's
columns, the runs of a TensorBoard export): the shortest suffix of its path that
no other run's path ends in, so that v1/train.tpumem and v3/train.tpumem are
`v1/train` and `v3/train`, never two `train`s (compare titled two columns alike,
and the export put three projects' runs into one as its "hosts").
"""

from __future__ import annotations

import os
from collections.abc import Sequence


def distinct_names(paths: Sequence[str]) -> tuple[str, ...]:
    """Each path's shortest distinct suffix: as few of its last parts as tell it
    from every other path (its file's name less its extension, then the
    directories above it); a path given twice is numbered (`train`, `train-2`)."""
    parts = [_parts(path) for path in paths]
    names = []
    for index, mine in enumerate(parts):
        depth = 1
        for other_index, other in enumerate(parts):
            if other_index != index and other != mine:
                depth = max(depth, _shared_tail(mine, other) + 1)
        names.append("/".join(mine[-depth:]))
    return numbered(names)


def numbered(names: Sequence[str]) -> tuple[str, ...]:
    """`names` with each repeated one numbered after its first (`t`, `t-2`), by a
    number no other name holds."""
    taken = set(names)
    seen: set[str] = set()
    result = []
    for name in names:
        if name in seen:
            number = 2
            while f"{name}-{number}" in taken:
                number += 1
            name = f"{name}-{number}"
            taken.add(name)
        seen.add(name)
        result.append(name)
    return tuple(result)


def _parts(path: str) -> tuple[str, ...]:
    """A path's parts, as it is spelled (`./v1/x` is `v1/x`; a URL's scheme and
    bucket are parts like any), the last without its extension."""
    if "://" not in path:
        path = os.path.normpath(path)
    parts = [part for part in path.split("/") if part] or [path]
    stem, dot, extension = parts[-1].rpartition(".")
    if dot and stem and extension:
        parts[-1] = stem
    return tuple(parts)


def _shared_tail(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    """How many last parts two paths have in common."""
    count = 0
    for mine, theirs in zip(reversed(a), reversed(b), strict=False):
        if mine != theirs:
            break
        count += 1
    return count
