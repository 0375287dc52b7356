"""`tpumem profile`'s live line on the terminal: one line at its foot, rewritten
while the script runs (what it says is the command's: commands/live_view.py),
gone when the report prints.

The script's output goes above it: its stderr passes through the launcher
(stderr_filter.py, on a pseudo-terminal, so the script still sees a terminal),
and so does its stdout where it is the same terminal (the same pseudo-terminal:
one stream, so the two keep their order). The launcher takes the line away before
each write and puts it back after, when the script's output ended a line. While
the script holds a line unfinished (a progress bar redrawn with \\r), the live
line waits for it to end.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

CLEAR = b"\r\x1b[K"  # back to the line's start, and clear it


class StatusLine:
    def __init__(self, fd: int = 2) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self._text = b""
        self._drawn = False
        self._at_line_start = True  # the script's output so far ended its line
        self._closed = False

    def show(self, text: str) -> None:
        try:
            width = os.get_terminal_size(self._fd).columns  # (the line's own terminal)
        except OSError:
            width = 0
        width = width if width >= 20 else 80  # (a terminal that gives no size: 0)
        with self._lock:
            self._text = text[: max(1, width - 1)].encode("utf-8", "replace")
            if self._at_line_start and not self._closed:
                self._write(CLEAR + self._text)
                self._drawn = True

    def passing(self, fd: int, data: bytes) -> None:
        """Writes the script's `data` to `fd`, above the line."""
        with self._lock:
            if self._drawn:
                self._write(CLEAR)
                self._drawn = False
            write_all(fd, data)
            if data:
                self._at_line_start = data.endswith(b"\n")
            if self._at_line_start and self._text and not self._closed:
                self._write(CLEAR + self._text)
                self._drawn = True

    def close(self) -> None:
        with self._lock:
            if self._drawn:
                self._write(CLEAR)
            self._drawn, self._closed = False, True

    def _write(self, data: bytes) -> None:
        write_all(self._fd, data)


def write_all(fd: int, data: bytes) -> None:
    while data:
        try:
            written = os.write(fd, data)
        except OSError:
            return  # our own terminal (or stderr) is gone: nothing to write things on
        data = data[written:]


# What the launcher is given to keep the line: called with the trace's path and
# the line once the script has started; it returns what stops it.
LiveView = Callable[[Path, StatusLine], Callable[[], None]]
