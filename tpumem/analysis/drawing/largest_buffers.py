"""The largest buffers of a run over their lives, for a page's allocation view
(in the spirit of PyTorch's memory_viz active-memory timeline): each buffer a
block as wide as its life and as tall as its size, with the call stack that made
it. Blocks are stacked where they first fit, lowest first, in the order they were
made: the view shows what held memory when, not device addresses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis.device_events import DeviceEvents
from tpumem.analysis.peak import GROUP_KEYS
from tpumem.trace.model import Trace
from tpumem.trace.stack_rows import Stack, call_stacks

LARGEST_BUFFERS = 300


@dataclass(frozen=True, slots=True)
class BufferLife:
    start_ns: int
    end_ns: int | None  # None: live to the end of the trace
    bytes: int
    offset: int  # bytes below it in the view
    labels: tuple[str | None, ...]  # by peak.GROUP_KEYS
    stack: int  # into LargestBuffers.stacks; -1 where not recorded


@dataclass(frozen=True, slots=True)
class LargestBuffers:
    buffers: tuple[BufferLife, ...]  # in the order they were made
    stacks: tuple[Stack, ...]
    allocations: int  # of the device: how many the view chose from


def largest_buffers(
    trace: Trace, events: DeviceEvents, count: int = LARGEST_BUFFERS
) -> LargestBuffers:
    allocs = np.flatnonzero(events.is_alloc)
    if len(allocs) > count:
        # The largest; of equal sizes, the ones made first.
        order = np.lexsort((allocs, -events.bytes[allocs].astype(np.int64)))
        allocs = np.sort(allocs[order[:count]])
    ends = events.ends()[allocs]
    rows = events.row[allocs]
    labels = [trace.codes_at(key, rows) for key in GROUP_KEYS]
    known, _ = call_stacks(trace)
    stack_ids = trace.numbers_at("stack", rows, -1).tolist()
    stacks: dict[int, int] = {}
    buffers = []
    placed: list[tuple[int, int, int]] = []  # (offset, bytes, end) of those still live
    for i, (event, end) in enumerate(zip(allocs.tolist(), ends.tolist(), strict=True)):
        size = int(events.bytes[event])
        placed = [p for p in placed if p[2] > event]
        offset = _first_fit(placed, size)
        placed.append((offset, size, end))
        stack = stack_ids[i]
        if stack in known and stack not in stacks:
            stacks[stack] = len(stacks)
        buffers.append(
            BufferLife(
                start_ns=int(events.time_ns[event]),
                end_ns=int(events.time_ns[end]) if end < len(events) else None,
                bytes=size,
                offset=offset,
                labels=tuple(values[c[i]] if c[i] >= 0 else None for c, values in labels),
                stack=stacks.get(stack, -1),
            )
        )
    return LargestBuffers(
        buffers=tuple(buffers),
        stacks=tuple(known[s] for s in stacks),
        allocations=int(events.is_alloc.sum()),
    )


def _first_fit(placed: list[tuple[int, int, int]], size: int) -> int:
    """The lowest offset where `size` bytes overlap none of `placed`."""
    offset = 0
    for start, length, _ in sorted(placed):
        if start - offset >= size:
            break
        offset = max(offset, start + length)
    return offset
