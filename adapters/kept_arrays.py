"""At the end of the run: the script's containers that hold many device arrays,
and the line that adds to each.

A leak's arrays are made at one line (the step's call) and kept at another
(`history.append(loss)`): the second is what the user changes. Python can tell it
only while the container is still reachable, so it is read when the script has
ended and before the interpreter tears its namespace down: the `__main__`
module's globals, one level into their dicts (`metrics['loss']`) and plain
objects (`trainer.outputs`). Read-only; the walk is bounded (WALKED) so a
script holding millions of objects is not slowed at its end.

The line comes from the script's own syntax tree: the first statement that adds
to the container by its name (`.append`, `.extend`, `.insert`, `+=`, `x[k] =`).
"""

from __future__ import annotations

import ast
import collections
import itertools
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tpumem.trace.metadata import KeptArrays
from tpumem.trace.source_paths import user_path

LEAST = 4  # arrays in one container: fewer is no pile
WALKED = 100_000  # elements looked at, at most, over all containers
_ADDS = frozenset({"append", "extend", "insert", "appendleft", "add", "update", "setdefault"})
_SEQUENCES = (list, tuple, set, frozenset, collections.deque)


def kept_arrays(
    namespace: Mapping[str, Any],
    path: str | None,
    is_array: Callable[[Any], bool],
    buffer_ids: Callable[[list[Any]], list[int]],
) -> tuple[KeptArrays, ...]:
    """The containers in `namespace` (the script's globals) holding at least
    LEAST arrays, largest first; `path`: the script, whose syntax gives the line."""
    budget = [WALKED]
    found = []
    for name, container in _candidates(namespace):
        arrays = _arrays_in(container, is_array, budget)
        if len(arrays) >= LEAST:
            found.append((name, type(container).__name__, arrays))
        if budget[0] <= 0:
            break
    if not found:
        return ()
    adds = _adding_lines(path) if path else {}
    kept = [
        KeptArrays(
            name=name,
            container=kind,
            arrays=len(arrays),
            buffer_ids=tuple(buffer_ids(arrays)),
            line=adds.get(name),
        )
        for name, kind, arrays in found
    ]
    return tuple(sorted(kept, key=lambda k: -k.arrays))


def _candidates(namespace: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(name as the script writes it, container): the globals, their dicts'
    entries and plain objects' attributes, one level down."""
    for name, value in list(namespace.items()):
        if not isinstance(name, str) or name.startswith("__"):
            continue
        if _is_container(value):
            yield name, value
        if type(value) is dict:
            for key, item in list(itertools.islice(value.items(), 1000)):
                if isinstance(key, str | int) and _is_container(item):
                    yield f"{name}[{key!r}]", item
        elif _is_plain_object(value):
            for attribute, item in list(itertools.islice(vars(value).items(), 1000)):
                if isinstance(attribute, str) and _is_container(item):
                    yield f"{name}.{attribute}", item


def _is_container(value: Any) -> bool:
    # The built-in kinds themselves: a subclass's iteration is the script's code
    # (a dict that loads on read), which must not run at its end.
    return type(value) in (*_SEQUENCES, dict)


def _is_plain_object(value: Any) -> bool:
    """An instance of the script's own kind with attributes (not a module, a
    class or a function, which hold code rather than data)."""
    return (
        not isinstance(value, type)
        and not callable(value)
        and type(value).__module__ == "__main__"
        and isinstance(getattr(value, "__dict__", None), dict)
    )


def _arrays_in(container: Any, is_array: Callable[[Any], bool], budget: list[int]) -> list[Any]:
    """The arrays among the container's elements, and among its elements'
    elements where those are tuples, lists or dicts (`history.append((x, y))`);
    `budget`: elements left to look at, spent here."""
    items = container.values() if isinstance(container, dict) else container
    # A dict's lists are containers of their own (_candidates: `metrics['loss']`).
    inner_kinds = (tuple, dict) if isinstance(container, dict) else (tuple, list, dict)
    arrays: list[Any] = []
    for item in list(itertools.islice(items, max(budget[0], 0))):
        budget[0] -= 1
        if is_array(item):
            arrays.append(item)
        elif type(item) in inner_kinds and budget[0] > 0:
            inner = item.values() if type(item) is dict else item
            for element in list(itertools.islice(inner, min(64, budget[0]))):
                budget[0] -= 1
                if is_array(element):
                    arrays.append(element)
    return arrays


def _adding_lines(path: str) -> dict[str, str]:
    """Per container as the script writes it, the first line that adds to it."""
    try:
        with open(path, "rb") as handle:
            tree = ast.parse(handle.read(), path)
    except (OSError, SyntaxError, ValueError):
        return {}
    lines: dict[str, int] = {}
    for node in ast.walk(tree):
        target = None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _ADDS
        ):
            target = node.func.value
        elif isinstance(node, ast.AugAssign):
            target = node.target
        elif isinstance(node, ast.Assign):
            subscripts = [t for t in node.targets if isinstance(t, ast.Subscript)]
            target = subscripts[0].value if subscripts else None
        if target is not None:
            name, line = ast.unparse(target), getattr(node, "lineno", 0)
            if name not in lines or line < lines[name]:
                lines[name] = line
    shown = user_path(path, os.getcwd())  # as the adapters name every line
    return {name: f"{shown}:{line}" for name, line in lines.items()}
