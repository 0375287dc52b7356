"""`--follow`: the processes the script started do not outlive the run.

`tpumem profile --follow` is the run's subreaper (Linux's PR_SET_CHILD_SUBREAPER):
a process of the tree whose parent ends becomes this process's child, not init's,
so this process sees how it ends and nothing of the tree escapes it by being
orphaned. When the script's process has ended, what is left of the tree gets
SIGTERM; what is still running GRACE_S later (or at once, when tpumem is asked
again to stop) gets SIGKILL. Every trace of the run is closed before it is
reported, and no process of it is left running under PID 1.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass, field

from tpumem.adapters.launch_protocol import GRACE_S
from tpumem.launch.signals import HeldSignals, reap_all
from tpumem.units import counted

_PR_SET_CHILD_SUBREAPER = 36
_KILL_ROUNDS = 30  # one a second: a process stuck in the kernel (D state) is left after


@dataclass
class TreeEnd:
    """How the rest of the tree was ended: the processes sent SIGTERM, and those
    killed after the grace period."""

    terminated: set[int] = field(default_factory=set)
    killed: set[int] = field(default_factory=set)
    left: set[int] = field(default_factory=set)  # still there after every SIGKILL
    waited_s: float = 0.0  # between SIGTERM and SIGKILL


def become_subreaper(on: bool = True) -> bool:
    """Whether this process now adopts the orphans of its descendants (Linux)."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0


def descendants(root: int) -> set[int]:
    """The processes under `root` (its children, theirs, ...) that have not ended,
    from /proc: one pass over the machine's processes."""
    children: dict[int, list[int]] = {}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as handle:
                    text = handle.read()
            except OSError:
                continue  # ended meanwhile
            # "pid (name) state ppid ...": the name may hold spaces and parentheses.
            fields = text[text.rfind(b")") + 2 :].split()
            if len(fields) < 2 or fields[0] in (b"Z", b"X"):
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    queue = [root]
    while queue:
        for child in children.get(queue.pop(), ()):
            if child not in found:
                found.add(child)
                queue.append(child)
    return found


def end_tree(held: HeldSignals, reaped: dict[int, int], grace_s: float = GRACE_S) -> TreeEnd:
    """Ends what is left of this process's tree (the script's process has ended):
    SIGTERM, then SIGKILL after `grace_s` or at the next stopping signal. The
    children that end go into `reaped`, their wait status by pid."""
    me = os.getpid()
    end = TreeEnd()
    left = descendants(me)
    if not left:
        reap_all(reaped)
        return end
    for pid in left:
        _send(pid, signal.SIGTERM)
    end.terminated = set(left)
    start = time.monotonic()
    deadline = start + grace_s
    while left and time.monotonic() < deadline:
        if held.pause(deadline - time.monotonic(), reaped):
            break  # asked again to stop: no more waiting
        left = descendants(me)
    end.waited_s = time.monotonic() - start
    for _ in range(_KILL_ROUNDS):
        if not left:
            break
        for pid in left:
            _send(pid, signal.SIGKILL)
        end.killed |= left
        held.pause(1.0, reaped)
        left = descendants(me)
    reap_all(reaped)
    end.left = left
    return end


def said(end: TreeEnd) -> str | None:
    """One line on how the rest of the tree was ended, if there was one."""
    if not end.terminated:
        return None
    line = (
        f"the script ended with {counted(len(end.terminated), 'process', 'processes')} it "
        "started still running: sent SIGTERM"
    )
    if end.killed:
        line += f", and SIGKILL to {len(end.killed):,} still running {end.waited_s:.0f} s later"
    if end.left:
        line += f"; {len(end.left):,} did not end (pids {', '.join(map(str, sorted(end.left)))})"
    return line


def _send(pid: int, number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, number)
