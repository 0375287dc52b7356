"""How `tpumem profile` waits for the profiled process, and what it does with the
signals sent to it meanwhile.

From before the trace is created until the run's ending is recorded, the signals
that stop a run (SIGINT, SIGTERM, SIGHUP) and SIGCHLD are blocked in this thread
and taken one at a time with sigwaitinfo, which says who sent each: none can kill
this process between the trace's creation and the record of how the run ended, and
none is lost while the child is being started. Those a process sent (`kill PID`)
are passed on to the profiled process; those the terminal sent (Ctrl-C, a hangup)
went to its whole foreground group, the profiled process with this one, and are
not sent twice. The profiled process unblocks them first thing (runner.py).

The kernel gives a signal to any thread that does not block it, and threads that
numpy and Arrow started before do not: one of them may take a signal while this
thread is not waiting for one. A handler is set for the block, so that such a
signal is noted (its sender unknown: it is passed on) rather than fatal. Signals
ignored when tpumem started stay ignored: none is passed on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from resource import struct_rusage  # what os.wait4 gives

STOPPING = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
_WAITED = STOPPING | {signal.SIGCHLD}
_SI_KERNEL = 0x80  # si_code of a signal the kernel sent: the terminal's, to its group
# How long a wait goes without looking at the signals another thread took (one
# taken just as this thread began to wait would otherwise wait for the next).
_LOOK_S = 0.5


@dataclass
class HeldSignals:
    """The signals this process holds, while it holds them (`held()`)."""

    unblock: list[int]  # what the profiled process unblocks (the rest was blocked before)
    ignored: frozenset[int] = frozenset()  # ignored when tpumem started: never passed on
    # Stopping signals that came before the profiled process started: passed on
    # whoever sent them (the terminal's did not reach it).
    early: set[int] = field(default_factory=set)
    taken: list[int] = field(default_factory=list)  # by another thread, not passed on yet

    def note(self, number: int, _frame: Any) -> None:
        """The handler, for a signal another thread took."""
        self.taken.append(number)

    def child_starts(self) -> None:
        """Just before the profiled process is started."""
        self.early = set(signal.sigpending()) & STOPPING

    def wait(self, pid: int, reaped: dict[int, int] | None = None) -> tuple[int, struct_rusage]:
        """Waits for process `pid` (a child) to end, passing on the stopping signals
        sent to this process; its wait status and resource usage. `reaped`: where
        the other children that end meanwhile (a subreaper's) go, their wait
        status by pid."""
        while True:
            while self.taken:
                _send(pid, self.taken.pop(0))
            ended = _reap(pid, reaped)
            if ended is not None:
                return ended
            info = signal.sigtimedwait(_WAITED, _LOOK_S)
            if info is None or info.si_signo == signal.SIGCHLD:
                continue
            number = info.si_signo
            if number in self.ignored:
                continue
            if info.si_code == _SI_KERNEL and number not in self.early:
                continue  # the terminal's: the profiled process has it too
            self.early.discard(number)
            _send(pid, number)

    def pause(self, timeout_s: float, reaped: dict[int, int]) -> bool:
        """Waits up to `timeout_s` for a child to end (reaped into `reaped`) or a
        stopping signal; whether one came (which asks the wait to end)."""
        info = signal.sigtimedwait(_WAITED, max(0.0, min(timeout_s, _LOOK_S)))
        reap_all(reaped)
        asked = bool(self.taken) or (
            info is not None and info.si_signo in STOPPING and info.si_signo not in self.ignored
        )
        self.taken.clear()
        return asked


def _send(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, number)


def _reap(pid: int, reaped: dict[int, int] | None) -> tuple[int, struct_rusage] | None:
    """`pid`'s wait status and usage once it has ended; the others that have, into
    `reaped` (where given: else they are left to whoever waits for them)."""
    if reaped is None:
        found, status, usage = os.wait4(pid, os.WNOHANG)
        return (status, usage) if found else None
    ended = None
    while True:
        try:
            found, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if not found:
            return ended
        if found == pid:
            ended = (status, usage)
        else:
            reaped[found] = status


def reap_all(reaped: dict[int, int]) -> None:
    """Reaps every child of this process that has ended, into `reaped`."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        reaped[pid] = status


@contextlib.contextmanager
def held() -> Iterator[HeldSignals]:
    """Holds the stopping signals and SIGCHLD for the block. What came meanwhile
    and was not taken (after the child ended) is acted on as the block ends, as it
    would have been: a SIGTERM sent while the run's ending was being recorded ends
    tpumem then, the trace whole."""
    ignored = frozenset(n for n in STOPPING if signal.getsignal(n) == signal.SIG_IGN)
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WAITED)
    holding = HeldSignals(unblock=sorted(_WAITED - previous_mask), ignored=ignored)
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():  # (where Python allows it)
        previous = {n: signal.signal(n, holding.note) for n in STOPPING - ignored}
    try:
        yield holding
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        for number in dict.fromkeys(holding.taken):
            os.kill(os.getpid(), number)
