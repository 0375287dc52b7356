"""Linux's parent-death signal (PR_SET_PDEATHSIG), for the processes tpumem
starts: a process nobody waits for any more must not go on holding the CPU or
the device when tpumem dies, however it dies (SIGKILL too)."""

from __future__ import annotations

import os
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None, number: int) -> None:
    """Signal `number` to this process when its parent (`parent_pid`, the thread
    that started it) ends; where the parent has ended already, this process ends
    now (128 + number)."""
    if parent_pid is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, number, 0, 0, 0)
    if os.getppid() != parent_pid:  # it ended before the signal was asked for
        os._exit(128 + number)
