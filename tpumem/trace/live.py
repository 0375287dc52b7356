"""Whether a trace is still being written: its writer holds a lock on it.

The writer takes a POSIX record lock (lockf) on the whole file when it opens the
trace and keeps it until it closes it, or until its process ends however it ends:
the kernel lets go of a dead process's locks. A record lock belongs to the
process, not to the descriptor, so a process the writer forks does not hold it
(it writes nothing to the trace either). A reader asks, without taking any lock,
whether another process holds one: a trace that is not closed and not locked was
left by a writer that died; one that is locked is still being written.

The lock is advisory and tells only: nothing waits on it. Where the file system
keeps no locks (some network file systems), a live trace reads as a cut one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import sys

# Linux's struct flock: l_type, l_whence (short), l_start, l_len (off_t), l_pid.
_FLOCK = "hhxxxxqqixxxx"


def hold_for_writing(descriptor: int) -> None:
    """Marks the trace open on `descriptor` (open for writing) as being written by
    this process, until the process closes it or ends."""
    with contextlib.suppress(OSError):  # a trace without the mark reads as before
        fcntl.lockf(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)


def writing_process(descriptor: int) -> int | None:
    """The process id of another process that holds the trace open on `descriptor`
    for writing (0 where it is in another PID namespace); None when none does."""
    if not sys.platform.startswith("linux"):
        return _writing_elsewhere(descriptor)
    asked = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
    try:
        answer = fcntl.fcntl(descriptor, fcntl.F_GETLK, asked)
    except OSError:
        return None
    kind, _, _, _, pid = struct.unpack(_FLOCK, answer)
    return None if kind == fcntl.F_UNLCK else pid


def _writing_elsewhere(descriptor: int) -> int | None:
    """Without Linux's struct layout: take a shared lock and give it back at once."""
    try:
        fcntl.lockf(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return 0
    fcntl.lockf(descriptor, fcntl.LOCK_UN)
    return None


def writing_process_at(path: str | os.PathLike[str]) -> int | None:
    """writing_process of the file at `path`; None when it cannot be opened."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        return writing_process(descriptor)
    finally:
        os.close(descriptor)
