"""Bytes by call stack: the buffers live at a moment grouped by the Python stack
that made them, largest first; what the flame graph of the peak draws."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis.device_events import DeviceEvents
from tpumem.trace.model import Trace
from tpumem.trace.stack_rows import Stack, call_stacks, op_stacks

# Buffers whose stack the capture did not record (allocator events with no Python
# call around them, imports, traces from before stacks): drawn as one block.
NO_STACK: Stack = ()


@dataclass(frozen=True, slots=True)
class StackBytes:
    frames: Stack  # outermost first; NO_STACK when not recorded
    bytes: int
    buffers: int


def stack_warnings(trace: Trace) -> list[str]:
    (_, unreadable), (_, unread_ops) = call_stacks(trace), op_stacks(trace)
    said = []
    if unreadable:
        said.append(
            f"left out {unreadable:,} call stacks that were not readable; their buffers "
            "show no call stack"
        )
    if unread_ops:
        said.append(
            f"left out {unread_ops:,} records of compiled functions' op stacks that were not "
            "readable; those programs' buffers show the lines XLA's metadata gives"
        )
    return said


def stack_bytes(
    trace: Trace, events: DeviceEvents, live: np.ndarray, sizes: np.ndarray | None = None
) -> tuple[StackBytes, ...]:
    """The allocations `live` (indices into `events`) grouped by stack, largest
    first; their bytes from `sizes` (per event) where given, else as recorded."""
    if not len(live):
        return ()
    stacks, _ = call_stacks(trace)
    ids = trace.numbers_at("stack", events.row[live], -1)
    if stacks:
        known = np.fromiter(stacks, np.int64, len(stacks))
        ids = np.where(np.isin(ids, known), ids, -1)
    else:
        ids = np.full(len(live), -1, np.int64)
    unique, inverse = np.unique(ids, return_inverse=True)
    weights = (events.bytes if sizes is None else sizes)[live]
    total = np.bincount(inverse, weights=weights).astype(np.int64)
    count = np.bincount(inverse)
    order = np.lexsort((unique, -total))
    return tuple(
        StackBytes(
            stacks.get(int(unique[g]), NO_STACK) if unique[g] >= 0 else NO_STACK,
            int(total[g]),
            int(count[g]),
        )
        for g in order.tolist()
    )
