"""What the machine lets a process hold, and whether the kernel killed one for want
of memory: read so that a run ended by SIGKILL can be told "possibly the OOM
killer" (the kernel says nothing to the process it kills). The memory a process
may use is the smaller of the machine's and its control group's limit; the
control group counts the kills its OOM killer made (cgroup v2 `memory.events`,
v1 `memory.oom_control`), where the process may read it."""

from __future__ import annotations

import os
from pathlib import Path

_CGROUP = Path("/sys/fs/cgroup")


def _own_cgroups() -> list[Path]:
    """The memory control group directories this process is in (v2, then v1)."""
    found: list[Path] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        _, controllers, where = line.split(":", 2)
        # In a container the group's own directory is often the mount's root.
        if controllers == "":  # cgroup v2
            found += [_CGROUP / where.lstrip("/"), _CGROUP]
        elif "memory" in controllers.split(","):
            found += [_CGROUP / "memory" / where.lstrip("/"), _CGROUP / "memory"]
    return [path for path in found if path.is_dir()]


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def memory_limit_bytes() -> int | None:
    """The most memory this process's processes may hold: the machine's, or its
    control group's limit where that is lower."""
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        return None
    for group in _own_cgroups():
        for name in ("memory.max", "memory.limit_in_bytes"):
            value = _read_int(group / name)
            if value is not None and 0 < value < limit:
                limit = value
    return limit


def oom_kills() -> int | None:
    """How many processes the control group's OOM killer has killed so far; None
    where no control group says."""
    for group in _own_cgroups():
        for name in ("memory.events", "memory.oom_control"):
            try:
                lines = (group / name).read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                key, _, value = line.partition(" ")
                if key == "oom_kill" and value.strip().isdigit():
                    return int(value)
    return None
