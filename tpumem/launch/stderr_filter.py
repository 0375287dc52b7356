"""The profiled script's stderr, passed through by `tpumem profile` less what the
framework logged on tpumem's own threads (adapters/quiet.py says which), and, on
a terminal, less the body of an allocator's out-of-memory log (below).

TensorFlow's profiler logs "Profiler session initializing / started / collecting
data / tear down" (absl's INFO lines) for every session, and tpumem runs one a
second: without this a run's stderr gained four lines a second. Only lines in
absl's format from a thread tpumem named are dropped; everything else the script
and the frameworks write passes through unchanged, partial lines (progress bars)
included. When stderr is a terminal the script gets a pseudo-terminal, so it
still sees one. The filter runs in the launcher, not in the profiled process, so
a process that crashes or is killed loses nothing it wrote.

On a terminal, an allocator's account of a failed allocation (TensorFlow's and
XLA's BFC allocator follow "ran out of memory trying to allocate ..." with a dump
of every bin and chunk, 150 lines and more) shows as that first line and one line
that says how many followed: the trace keeps its figures (oom_log.py), and the
report gives them. Written to a file or a pipe, stderr keeps every line.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import sys
import threading

from tpumem.adapters.launch_protocol import ANNOUNCEMENT
from tpumem.launch.oom_log import OomLogReader, Part
from tpumem.launch.status_line import StatusLine, write_all

# absl: "I1123 10:43:57.349421   12878 file.cc:150] message" (and "I0000 00:00:..."
# before absl is initialized); the thread id is the third field.
_ABSL_LINE = re.compile(rb"^[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +(\d+) \S+:\d+\] ")
_HOLD_S = 0.05  # how long an unfinished line that may be a log line is held back


class StderrFilter:
    """Owns the write end the child gets as its stderr, and a thread that passes
    what it reads on to this process's stderr."""

    def __init__(self, destination: int = 2, status: StatusLine | None = None) -> None:
        self.destination = destination
        self.status = status  # the live line the output goes above, on a terminal
        self.dropped = 0
        self._threads: set[bytes] = set()
        # An allocator's dump is folded to one line where a person reads stderr.
        self.fold_dumps = os.isatty(destination)
        self._folded = 0  # lines of the allocator's dump open now, not passed on
        if self.fold_dumps:
            self.read_fd, self.child_fd = os.openpty()
            _raw_like(self.child_fd, destination)
        else:
            self.read_fd, self.child_fd = os.pipe()
        self._pending = b""
        self.oom_logs = OomLogReader()  # what the allocator said of failed allocations
        self._thread = threading.Thread(target=self._pump, name="tpumem-stderr", daemon=True)

    def start(self) -> None:
        """Once the child has its copy of the write end: keep none here."""
        os.close(self.child_fd)
        self._thread.start()

    def finish(self, timeout_s: float = 2.0) -> None:
        """After the child ended: what it wrote is passed on (a grandchild that
        still holds its stderr is not waited for past the timeout)."""
        self._thread.join(timeout_s)

    def _pump(self) -> None:
        while True:
            ready, _, _ = select.select([self.read_fd], [], [], _HOLD_S if self._pending else None)
            if not ready:  # an unfinished line waited long enough: it is not a log line
                self._write(self._pending)
                self._pending = b""
                continue
            try:
                data = os.read(self.read_fd, 65536)
            except OSError:  # a pseudo-terminal whose other end closed
                data = b""
            if not data:
                break
            self._feed(data)
        self._write(self._fold_note() + self._pending)
        with contextlib.suppress(OSError):
            os.close(self.read_fd)

    def _feed(self, data: bytes) -> None:
        lines = (self._pending + data).split(b"\n")
        self._pending = lines.pop()
        kept = [self._passed(line) for line in lines]
        pending = self._pending
        # A partial line is held only while it could still become a line to drop.
        if pending and not (
            pending.startswith(ANNOUNCEMENT[: len(pending)])
            or _could_log(pending)
            or (self.fold_dumps and self.oom_logs.dump_open)
        ):
            kept.append(pending)
            self._pending = b""
        self._write(b"".join(kept))

    def _passed(self, line: bytes) -> bytes:
        """What of a line goes on: itself, nothing, or (folding an allocator's
        dump) the line that says where the dump went."""
        part = self.oom_logs.feed(line)
        if self.fold_dumps and part in (Part.DUMP, Part.LAST):
            self._folded += 1
            return self._fold_note() if part is Part.LAST else b""
        if line.startswith(ANNOUNCEMENT):
            self._threads.add(line[len(ANNOUNCEMENT) :].strip())
            return b""
        match = _ABSL_LINE.match(line.lstrip(b"\r"))
        if match and match.group(1) in self._threads:
            self.dropped += 1
            return b""
        # (A new failure's first line ends the dump before it, where that was cut short.)
        return (self._fold_note() if part is Part.HEAD else b"") + line + b"\n"

    def _fold_note(self) -> bytes:
        if not self._folded:
            return b""
        folded, self._folded = self._folded, 0
        lines = "line" if folded == 1 else "lines"
        return (
            f"tpumem: the allocator's account of it went on for {folded:,} more {lines} "
            "(its bins, chunks and stats): their figures are in the trace and its report\n"
        ).encode()

    def _write(self, data: bytes) -> None:
        if self.status is not None:
            self.status.passing(self.destination, data)
        else:
            write_all(self.destination, data)


def _could_log(partial: bytes) -> bool:
    """Whether an unfinished line may still turn into an absl log line."""
    return partial[:1] in (b"I", b"W", b"E", b"F") and len(partial) < 512


def _raw_like(child_fd: int, terminal: int) -> None:
    """The pseudo-terminal passes output bytes as they are (no \\n -> \\r\\n: the
    real terminal does that once) and has the real terminal's size."""
    import fcntl
    import termios

    with contextlib.suppress(OSError, termios.error):
        attributes = termios.tcgetattr(child_fd)
        attributes[1] &= ~termios.OPOST  # output flags
        termios.tcsetattr(child_fd, termios.TCSANOW, attributes)
    with contextlib.suppress(OSError):
        size = fcntl.ioctl(terminal, termios.TIOCGWINSZ, b"\0" * 8)
        fcntl.ioctl(child_fd, termios.TIOCSWINSZ, size)


def filter_available() -> bool:
    return sys.platform.startswith("linux")
