"""How `tpumem fit` waits for the processes that compile the script, and what a
signal that stops it (SIGINT, SIGTERM, SIGHUP) does meanwhile.

The compiling process (adapters/fit_runner.py) runs in a session of its own, so
the terminal's Ctrl-C or hangup reaches tpumem alone; tpumem holds those signals
while it waits (launch/signals.py) and, at the first, ends the compiling process
with SIGKILL: no handler runs there, so libtpu's fatal-signal handler prints no
stack dump, and what it compiled so far is on disk already (a line each, as it
went). fit then reports what was compiled, says in one line that it was stopped,
and exits 128 + N, as a shell says a signal. If tpumem dies anyway (SIGKILL),
Linux sends the compiling process SIGKILL (fit_runner's PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tpumem.launch.signals import STOPPING, HeldSignals, held
from tpumem.progress import progress

_LOOK_S = 0.5  # how long a wait goes without looking at the signals another thread took


@dataclass(frozen=True)
class FitStopped(Exception):
    """A stopping signal ended fit while it compiled: `trace` holds what was
    compiled before (None: nothing was)."""

    number: int
    trace: Path | None = None
    where: str = ""  # the slice (and value) it was compiling for


def run_compiling(
    command: Sequence[str], env: dict[str, str], doing: str = "compiling with XLA:TPU"
) -> tuple[int, int | None]:
    """Runs the compiling process to its end, the seconds it has taken turning on
    a terminal beside `doing` (a compile takes seconds to minutes; nothing else
    moves meanwhile); (its status as subprocess gives it, the stopping signal
    that made tpumem end it, None where it ended by itself)."""
    with held() as signals, progress(doing) as say:
        child = subprocess.Popen(
            list(command), env=env, start_new_session=True, preexec_fn=_unblocked
        )
        stopping, began = None, time.monotonic()
        while True:
            found, status = os.waitpid(child.pid, os.WNOHANG)
            if found:
                break
            say(f"{time.monotonic() - began:,.0f} s")
            number = _stopping(signals)
            if number is not None and stopping is None:
                stopping = number
                os.kill(child.pid, signal.SIGKILL)
        child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, stopping


def run_passing_on(command: Sequence[str], env: dict[str, str]) -> int:
    """Runs `tpumem profile` (fit's HLO route) to its end, passing on the stopping
    signals a process sent tpumem, as profile passes them to its script (the
    terminal's reach it from the terminal); its status (128 + N: stopped by N)."""
    with held() as signals:
        child = subprocess.Popen(list(command), env=env, preexec_fn=_unblocked)
        status, _ = signals.wait(child.pid)
        child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode


def stopped_by(status: int) -> int | None:
    """The stopping signal a `tpumem profile` status says ended it (128 + N)."""
    return status - 128 if status - 128 in STOPPING else None


def _unblocked() -> None:
    """In the child, before it runs: the signals tpumem holds are its own again."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPPING | {signal.SIGCHLD})


def _stopping(signals: HeldSignals) -> int | None:
    """The next stopping signal sent to tpumem, whoever sent it, waiting a moment
    for one; None where none came."""
    if signals.taken:
        return signals.taken.pop(0)
    info = signal.sigtimedwait(STOPPING | {signal.SIGCHLD}, _LOOK_S)
    if info is None or info.si_signo == signal.SIGCHLD or info.si_signo in signals.ignored:
        return None
    return info.si_signo


def say_stopped(stop: FitStopped) -> int:
    """The one line on how fit was stopped; the exit status (128 + N)."""
    name = signal.Signals(stop.number).name
    how = "interrupted (SIGINT)" if stop.number == signal.SIGINT else f"stopped by {name}"
    if stop.trace is None:
        said = f"fit {how} while compiling for {stop.where}: nothing was compiled, nothing written"
    else:
        said = (
            f"fit {how} while compiling for {stop.where}: the answer covers only the "
            f"programs compiled before (in {stop.trace})"
        )
    print(f"tpumem: {said}", file=sys.stderr, flush=True)
    return 128 + stop.number
