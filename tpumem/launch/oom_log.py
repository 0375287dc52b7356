"""The allocator's account of a failed allocation, read from the script's stderr.

TensorFlow's and XLA's BFC allocator log each allocation they cannot make:
"Allocator (NAME) ran out of memory trying to allocate 9.00MiB (rounded to
9437184)requested by op Fill", a dump of its bins and chunks, then "Stats:" with
its limit, bytes in use and largest free block. That is the only place those
figures of the failure are said; `tpumem profile` keeps the first line, the pool
line and the stats of each, with the time it read them, and records them in the
trace, with the whole dump as stderr had it (up to KEPT_LINES lines). The chunk
dump (which can run to thousands of lines) is summed as it passes: the bytes of
the chunks in use and the largest free chunk, exact where the stats print MiB to
two decimals (and LargestFreeBlock as 0B unless the allocator was asked to track
it).
"""

from __future__ import annotations

import enum
import re
import time

from tpumem.trace.metadata import AllocatorLog

_HEAD = b"ran out of memory trying to allocate"
_KEEP = re.compile(
    rb"^\s*(Limit|InUse|MaxInUse|NumAllocs|MaxAllocSize|LargestFreeBlock):|Total size in pool:"
)
_CHUNK = re.compile(rb"\] (InUse|Free)\s+at [0-9a-fA-Fx]+ of size (\d+)")
_LAST_STAT = b"LargestFreeBlock:"
# The lines an allocator's log is made of: its own log lines, its stats, and the
# two lines its first one goes on with. Any other line (the script's, another
# thread's) is not the log's, wherever it falls.
_LOG_LINE = re.compile(
    rb"bfc_allocator\.cc:\d+\]"
    rb"|^\s*(Stats|Limit|InUse|MaxInUse|NumAllocs|MaxAllocSize|Reserved|PeakReserved"
    rb"|LargestFreeBlock):"
    rb"|^If the cause is memory fragmentation|^Current allocation summary follows"
)
_MOST_LINES = 100_000  # a dump longer than this has lost its stats: give up on it
KEPT_LINES = 20_000  # of a dump, kept whole in the trace


class Part(enum.Enum):
    """What a line of stderr is to the allocator's log."""

    HEAD = "head"  # "ran out of memory trying to allocate ...": a log begins
    DUMP = "dump"  # a line of the log after its first
    LAST = "last"  # its last line (the stats' LargestFreeBlock)


class OomLogReader:
    """Fed the lines of stderr; keeps each failure's first line and stats."""

    def __init__(self) -> None:
        self.logs: list[AllocatorLog] = []
        self._open: list[bytes] | None = None
        self._lines: list[bytes] = []  # the whole log, as stderr had it
        self._seen = 0
        self._time = 0
        self._in_use: int | None = None
        self._largest_free: int | None = None

    def feed(self, line: bytes) -> Part | None:
        """Reads a line: what it is to an allocator's log, None for none."""
        if _HEAD in line:
            self._close()
            self._open, self._seen, self._time = [line], 0, time.time_ns()
            self._lines = [line]
            self._in_use = self._largest_free = None
            return Part.HEAD
        if self._open is None or not _LOG_LINE.search(line):
            return None
        self._seen += 1
        if len(self._lines) < KEPT_LINES:
            self._lines.append(line)
        if b" of size " in line:
            chunk = _CHUNK.search(line)
            if chunk is not None:
                size = int(chunk.group(2))
                if chunk.group(1) == b"InUse":
                    self._in_use = (self._in_use or 0) + size
                else:
                    self._largest_free = max(self._largest_free or 0, size)
        elif _KEEP.search(line):
            self._open.append(line)
        if line.lstrip().startswith(_LAST_STAT) or self._seen > _MOST_LINES:
            self._close()
            return Part.LAST
        return Part.DUMP

    @property
    def dump_open(self) -> bool:
        return self._open is not None

    def _close(self) -> None:
        if self._open is not None:
            # A dump that listed in-use chunks and no free one had none free.
            largest = self._largest_free
            if largest is None and self._in_use is not None:
                largest = 0
            self.logs.append(
                AllocatorLog(
                    wall_time_ns=self._time,
                    text=b"\n".join(self._open).decode(errors="replace"),
                    chunks_in_use_bytes=self._in_use,
                    largest_free_chunk_bytes=largest,
                    dump=b"\n".join(self._lines).decode(errors="replace"),
                    dump_lines=self._seen + 1,
                )
            )
            self._open = None

    def finish(self) -> list[AllocatorLog]:
        self._close()
        return self.logs
