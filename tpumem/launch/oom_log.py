"""The allocator's account of a failed allocation, read from the script's stderr.

TensorFlow's and XLA's BFC allocator log each allocation they cannot make:
"Allocator (NAME) ran out of memory trying to allocate 9.00MiB (rounded to
9437184)requested by op Fill", a dump of its bins and chunks, then "Stats:" with
its limit, bytes in use and largest free block. That is the only place those
figures of the failure are said; `tpumem profile` keeps the first line, the pool
line and the stats of each, with the time it read them, and records them in the
trace with how many lines the log had. The chunk dump (which can run to
thousands of lines) is not kept but summed as it passes: the bytes of the chunks
in use and the largest free chunk, exact where the stats print MiB to two
decimals (and LargestFreeBlock as 0B unless the allocator was asked to track it).

A log ends at its stats' last line, at the occupancy line the allocator prints
after them, or OPEN_S after it began (a log whose INFO lines were not printed,
TF_CPP_MIN_LOG_LEVEL=1 or JAX's default logging, has neither stats nor dump).
The allocator's warning that a failed allocation "is not a failure" (it retries
after freeing) begins none.
"""

from __future__ import annotations

import enum
import re
import threading
import time

from tpumem.trace.metadata import AllocatorLog

_HEAD = b"ran out of memory trying to allocate"
_NOT_A_FAILURE = b"not a failure"
# "bfc_allocator.cc:513] ****____xx": which chunks of the pool are in use, after the stats.
_OCCUPANCY = re.compile(rb"bfc_allocator\.cc:\d+\] [*_x]+\s*$")
OPEN_S = 2.0  # a log's lines come at once: one open longer has ended unseen
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


class Part(enum.Enum):
    """What a line of stderr is to the allocator's log."""

    HEAD = "head"  # "ran out of memory trying to allocate ...": a log begins
    DUMP = "dump"  # a line of the log after its first
    LAST = "last"  # its last line (the stats' LargestFreeBlock, or the occupancy line)


class OomLogReader:
    """Fed the lines of stderr; keeps each failure's first line and stats. (Fed
    on the thread that reads stderr, finished on another: one lock.)"""

    def __init__(self) -> None:
        self.logs: list[AllocatorLog] = []
        self._lock = threading.Lock()
        self._open: list[bytes] | None = None
        self._seen = 0
        self._time = 0
        self._in_use: int | None = None
        self._largest_free: int | None = None

    def feed(self, line: bytes) -> Part | None:
        """Reads a line: what it is to an allocator's log, None for none."""
        with self._lock:
            return self._feed(line)

    def _feed(self, line: bytes) -> Part | None:
        if self._open is not None and time.time_ns() - self._time > OPEN_S * 1e9:
            self._close()
        if _HEAD in line and _NOT_A_FAILURE not in line:
            self._close()
            self._open, self._seen, self._time = [line], 0, time.time_ns()
            self._in_use = self._largest_free = None
            return Part.HEAD
        if self._open is None or not _LOG_LINE.search(line):
            return None
        self._seen += 1
        if _OCCUPANCY.search(line):
            self._close()
            return Part.LAST
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
        return self._open is not None and time.time_ns() - self._time <= OPEN_S * 1e9

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
                    lines=self._seen + 1,
                )
            )
            self._open = None

    def finish(self) -> list[AllocatorLog]:
        with self._lock:
            self._close()
            return list(self.logs)
