"""The allocator's account of a failed allocation, read from the script's stderr.

TensorFlow's and XLA's BFC allocator log each allocation they cannot make:
"Allocator (NAME) ran out of memory trying to allocate 9.00MiB (rounded to
9437184)requested by op Fill", a dump of its bins and chunks, then "Stats:" with
its limit, bytes in use and largest free block. That is the only place those
figures of the failure are said; `tpumem profile` keeps the first line and the
stats of each (not the chunk dump, which can run to thousands of lines) with the
time it read them, and records them in the trace.
"""

from __future__ import annotations

import re
import time

_HEAD = b"ran out of memory trying to allocate"
_STAT = re.compile(rb"^\s*(Limit|InUse|MaxInUse|NumAllocs|MaxAllocSize|LargestFreeBlock):")
_LAST_STAT = b"LargestFreeBlock:"
_MOST_LINES = 100_000  # a dump longer than this has lost its stats: give up on it


class OomLogReader:
    """Fed the lines of stderr; keeps each failure's first line and stats."""

    def __init__(self) -> None:
        self.logs: list[tuple[int, str]] = []  # (wall-clock ns, text)
        self._open: list[bytes] | None = None
        self._seen = 0

    def feed(self, line: bytes) -> None:
        if _HEAD in line:
            self._close()
            self._open, self._seen = [line], 0
            self.logs.append((time.time_ns(), ""))
            return
        if self._open is None:
            return
        self._seen += 1
        if _STAT.match(line):
            self._open.append(line)
        if line.lstrip().startswith(_LAST_STAT) or self._seen > _MOST_LINES:
            self._close()

    def _close(self) -> None:
        if self._open is not None:
            text = b"\n".join(self._open).decode(errors="replace")
            self.logs[-1] = (self.logs[-1][0], text)
            self._open = None

    def finish(self) -> list[tuple[int, str]]:
        self._close()
        return self.logs
