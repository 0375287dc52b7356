"""Where XSpace profiles lie under a directory a user gives: the layouts XProf and
TensorBoard write, and no deeper. A profile run's directory holds
`<host>.xplane.pb`; a logdir holds `plugins/profile/<run>/<host>.xplane.pb`, also
one or two directories down (Keras's TensorBoard callback writes `logs/train/
plugins/...`). Searching every directory below instead made `tpumem report /`
walk the whole filesystem and call whatever it found one run.

Only regular files count: a link or a FIFO named like a profile is not read."""

from __future__ import annotations

import stat
from fnmatch import fnmatchcase
from pathlib import Path

from tpumem.errors import TpumemError
from tpumem.xplane import XPLANE_SUFFIX

_LAYOUTS = (
    f"*{XPLANE_SUFFIX}",  # a profile run's directory
    f"*/*{XPLANE_SUFFIX}",  # plugins/profile: one directory a run
    f"plugins/profile/*/*{XPLANE_SUFFIX}",  # a TensorBoard logdir
    f"*/plugins/profile/*/*{XPLANE_SUFFIX}",
    f"*/*/plugins/profile/*/*{XPLANE_SUFFIX}",
)


def profile_files(directory: Path) -> list[Path]:
    """The XSpace profiles under `directory` in XProf's layouts, sorted."""
    found = set()
    for layout in _LAYOUTS:
        for path in directory.glob(layout):
            if is_regular(path):
                found.add(path)
    return sorted(found)


LAYOUT_DEPTH = max(len(layout.split("/")) for layout in _LAYOUTS)


def in_layout(relative: str) -> bool:
    """Whether a file at `relative` (with /) below a directory given is a profile
    in one of XProf's layouts: the rule of `profile_files`, for a listing (object
    storage's) rather than a directory here. (A glob here never yields `..` or an
    empty part; a listing can: `*` would match them.)"""
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return False
    return any(
        len(parts) == len(layout) and all(map(fnmatchcase, parts, layout))
        for layout in (pattern.split("/") for pattern in _LAYOUTS)
    )


def chosen_run(runs: list[str], run: str | None, where: object) -> str:
    """The profile run to read of a logdir's: `run`, else the newest (XProf names
    runs by their start time, so the last name is the newest)."""
    if run is None:
        return max(runs)
    if run not in runs:
        raise TpumemError(f"{where}: no run named {run!r} (runs: {', '.join(sorted(runs))})")
    return run


def is_regular(path: Path) -> bool:
    """A regular file itself, not a link to one (nor a FIFO, a device)."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except OSError:
        return False
