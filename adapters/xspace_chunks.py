"""Consecutive profiler sessions of one process as one stream of trace rows.

An adapter that cannot subscribe to the allocator's events reads them from short
profiler sessions run back to back (each a chunk of at most a second or so), so
that the trace grows while the program runs. Each session's XSpace has its own
clock origin and knows nothing of the others: this module puts every event on the
trace's clock and pairs a free with an allocation made in an earlier chunk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tpumem.xplane.memory_events import MemoryEvents, parse_space, read_memory_events
from tpumem.xplane.trace_columns import (
    allocator_codes,
    mark_columns,
    pair_buffers,
    trace_columns,
)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One session's rows, ready for TraceWriter.write_columns."""

    events: dict[str, object]
    event_count: int
    marks: dict[str, object]
    mark_count: int
    start_ns: int | None  # the session's span on the trace clock, where recorded
    stop_ns: int | None


@dataclass(slots=True)
class ChunkConverter:
    """Converts the XSpaces of successive sessions, in order, for a trace whose
    clock starts at `trace_start_ns` (ns since the epoch)."""

    trace_start_ns: int
    # (allocator, address) -> buffer id of an allocation not yet freed.
    _open: dict[tuple[str, int], int] = field(default_factory=dict)
    _next_id: int = 0

    @property
    def open_buffers(self) -> int:
        return len(self._open)

    def convert(self, data: bytes) -> Chunk:
        return self.convert_events(read_memory_events(parse_space(data), data))

    def convert_events(self, events: MemoryEvents) -> Chunk:
        start_ns = events.profile_start_ns
        # Without the session's start, events keep the session's own origin.
        origin_ps = (self.trace_start_ns - (start_ns or self.trace_start_ns)) * 1000
        marks, mark_count = mark_columns(events, origin_ps)
        if not len(events):
            return Chunk({}, 0, marks, mark_count, *self._span(events))
        columns = trace_columns(events, origin_ps, self._buffer_ids(events))
        return Chunk(columns, len(events), marks, mark_count, *self._span(events))

    def _span(self, events: MemoryEvents) -> tuple[int | None, int | None]:
        start, stop = events.profile_start_ns, events.profile_stop_ns
        if start is None or stop is None:
            return None, None
        return start - self.trace_start_ns, stop - self.trace_start_ns

    def _buffer_ids(self, events: MemoryEvents) -> np.ndarray:
        codes = allocator_codes(events)
        address = events.numeric["addr"].values
        is_alloc = events.is_alloc
        local = pair_buffers(codes, address, is_alloc)  # ids are rows of this chunk
        freed_here = np.zeros(len(events), dtype=bool)
        freed_here[local[~is_alloc & (local >= 0)]] = True
        buffer_id = np.where(local >= 0, local + self._next_id, -1)
        names = events.strings["allocator_name"].dictionary.to_pylist()
        # Frees of buffers from earlier chunks: few (long-lived buffers), so a loop.
        for row in np.flatnonzero(~is_alloc & (local < 0)):
            key = (names[codes[row]], int(address[row]))
            buffer_id[row] = self._open.pop(key, -1)
        for row in np.flatnonzero(is_alloc & ~freed_here):
            self._open[(names[codes[row]], int(address[row]))] = int(buffer_id[row])
        self._next_id += len(events)
        return buffer_id
