"""Linux's parent-death signal (PR_SET_PDEATHSIG), for the processes tpumem
starts: a process nobody waits for any more must not go on holding the CPU or
the device when tpumem dies, however it dies (SIGKILL too); and what /proc says
of a process's end and of its ancestors."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def parent_death_signal(number: int) -> None:
    """Asks Linux for signal `number` when this process's parent (the thread that
    started it) ends; 0 lets it go. Nothing where there is no prctl."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, number, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def die_with_parent(
    parent_pid: int | None, number: int, before_exit: Callable[[], None] | None = None
) -> None:
    """Signal `number` to this process when its parent (`parent_pid`) ends; where
    the parent has ended already, this process ends now (128 + number), after
    `before_exit`."""
    if parent_pid is None or not sys.platform.startswith("linux"):
        return
    parent_death_signal(number)
    if os.getppid() != parent_pid:  # it ended before the signal was asked for
        if before_exit is not None:
            before_exit()
        os._exit(128 + number)


_MOST_GENERATIONS = 64  # launchers between tpumem and a process, at the most


def _state_and_parent(pid: int) -> tuple[bytes, int] | None:
    """(state, parent's pid) of process `pid`, from /proc; None where it has none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
        fields = text[text.rfind(b")") + 2 :].split()  # (after the name, which may hold ")")
        return fields[0], int(fields[1])
    except (OSError, ValueError, IndexError):
        return None


def ended(pid: int) -> bool:
    """Whether process `pid` has ended (one not waited for yet is a zombie, and still
    its children's parent to getppid)."""
    found = _state_and_parent(pid)
    return found is None or found[0] in (b"Z", b"X")


def an_ancestor(pid: int) -> bool:
    """Whether `pid` is this process's parent, or its parent's, and so on: a pid
    handed down in the environment names tpumem only in tpumem's own tree (another
    pid namespace gives the number to another process)."""
    current = os.getppid()
    for _ in range(_MOST_GENERATIONS):
        if current == pid:
            return True
        found = _state_and_parent(current) if current > 1 else None
        if found is None:
            return False
        current = found[1]
    return False
