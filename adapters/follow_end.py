"""A recording process ends with `tpumem profile`, whatever ends it: each of
`--follow`'s, and profile's runner once its recording has started.

While tpumem lives it is the run's subreaper and ends what the script leaves
(launch/tree.py). When it dies without a word (SIGKILL), nothing is left to: each
recording process watches tpumem itself (a pidfd, from a thread of its own), not
its parent, which may be a launcher that lives on (a shell, torchrun). When
tpumem is gone, the process gets SIGTERM as tree.py would send it, with its
ending written in its trace first where SIGTERM would kill it outright (its
default); one that handles SIGTERM ends as its handler says (its trace closed as
it exits); one still running GRACE_S later gets SIGKILL, its ending written
first. Linux's parent-death signal (PR_SET_PDEATHSIG) stands in for the watch in
the processes that record nothing (follow_boot), and is let go in those that
record: the watch outlives the parent that signal is bound to. (profile's runner,
tpumem's own child, is watched so that its ending is written: its parent-death
SIGTERM killed it outright.)
"""

from __future__ import annotations

import os
import select
import signal
import threading
import time
from collections.abc import Callable

from tpumem.adapters.launch_protocol import GRACE_S
from tpumem.adapters.parent_death import an_ancestor, parent_death_signal
from tpumem.threads import leave_signals_to_the_script
from tpumem.trace.metadata import ExitStatus

_POLL_S = 1.0  # where no pidfd can be had: how often tpumem's pid is looked at

Finish = Callable[[ExitStatus, str], None]  # the ending and its warning, into the trace


def watch_tpumem(
    tpumem_pid: int | None, finish: Finish, command: str = "tpumem profile --follow"
) -> None:
    """From now on this process ends when `tpumem_pid` does (`finish` writes
    its ending first); the parent-death signal is let go. (profile's runner
    watches tpumem so too, once its recording has started: `command`.)"""
    if tpumem_pid is None or not hasattr(os, "pidfd_open") or not an_ancestor(tpumem_pid):
        return  # (a process in another pid namespace, where that number is another's)
    parent_death_signal(0)
    threading.Thread(
        target=_watch, args=(tpumem_pid, finish, command), name="tpumem-watch", daemon=True
    ).start()


def _watch(tpumem_pid: int, finish: Finish, command: str) -> None:
    leave_signals_to_the_script()
    try:
        descriptor = os.pidfd_open(tpumem_pid)
    except ProcessLookupError:
        descriptor = None  # gone already
    except OSError:  # (no pidfd here: a look each second)
        descriptor = -1
    if descriptor == -1:
        while _alive(tpumem_pid):
            time.sleep(_POLL_S)
    elif descriptor is not None:
        waiting = select.poll()
        waiting.register(descriptor, select.POLLIN)  # readable once the process has ended
        while not waiting.poll():
            pass
        os.close(descriptor)
    _end(finish, command)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _end(finish: Finish, command: str) -> None:
    """tpumem has died: SIGTERM, then SIGKILL GRACE_S later, each ending written
    where it kills the process outright."""
    why = f"{command} ended before this process (it was killed?)"
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        _within_grace(
            finish,
            ExitStatus(signal=signal.SIGTERM, signal_name="SIGTERM"),
            f"{why}: the process sent itself SIGTERM; the trace holds what was written before",
        )
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)  # (a process that handles SIGTERM may save its state)
    _within_grace(
        finish,
        ExitStatus(signal=signal.SIGKILL, signal_name="SIGKILL"),
        f"{why}: SIGTERM had not ended the process {GRACE_S:.0f} s later; it sent itself SIGKILL",
    )
    os.kill(os.getpid(), signal.SIGKILL)


def _within_grace(finish: Finish, ending: ExitStatus, warning: str) -> None:
    """The ending written, waited for GRACE_S at most: an adapter that cannot
    stop (a lock the process held as it was stopped) keeps no process alive."""
    writing = threading.Thread(target=finish, args=(ending, warning), daemon=True)
    writing.start()
    writing.join(GRACE_S)
