"""Linux's parent-death signal (PR_SET_PDEATHSIG), for the processes tpumem
starts: a process nobody waits for any more must not go on holding the CPU or
the device when tpumem dies, however it dies (SIGKILL too)."""

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
