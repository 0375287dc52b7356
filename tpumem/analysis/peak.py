"""Peak bytes in use, when it happened, and what was live at that moment."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from tpumem.analysis.device_events import DeviceEvents, step_marks
from tpumem.analysis.stacks import StackBytes, stack_bytes
from tpumem.trace.model import Trace
from tpumem.trace.schema import MARK, PHASES

GROUP_KEYS = ("op", "region", "dtype", "shape", "source")
NO_REGION = "(no region)"  # buffers the trace gave no region
UNSEEN = "(allocated unseen)"  # bytes in use held by buffers the capture never saw made
# Bytes the allocator reserved outside its heap (a TPU program's stack): XProf's
# memory_profile names this region "stack" too.
STACK = "stack"


@dataclass(frozen=True, slots=True)
class LiveGroup:
    """Live buffers at the peak that share op, region, dtype, shape and source."""

    op: str | None
    region: str | None
    dtype: str | None
    shape: str | None
    source: str | None
    count: int
    bytes: int


@dataclass(frozen=True, slots=True)
class PeakBreakdown:
    bytes: int
    time_ns: int  # the first time bytes in use reached the peak
    last_time_ns: int  # the last time they were at it (a loop reaches it every step)
    step: int | None  # None in a phase that is not training
    event_index: int
    live_buffers: int
    # Bytes in use at the peak held by buffers allocated unseen (before the capture
    # began, or in a gap between its profiler sessions): the trace cannot name them.
    unattributed_bytes: int
    # Where those can have been made: the allocator's bytes in use when the
    # capture began (measured; 0 where unknown), and the capture's gaps before the peak.
    held_before_capture_bytes: int
    gaps_before_peak: int
    stack_bytes: int  # reserved outside the heap at the peak (device_events.py)
    groups: tuple[LiveGroup, ...]
    by_region: tuple[tuple[str, int], ...]
    stacks: tuple[StackBytes, ...] = ()  # live bytes by the call stack that made them
    phase: str | None = None  # "evaluate()", "predict()": not training (phase_at)


def phase_at(trace: Trace, time_ns: int) -> str | None:
    """The phase under way at `time_ns` where it is not training: Keras'
    evaluate() or predict(), by the last phase mark at or before it."""
    times, phases = trace.derived("phase marks", lambda: _phase_marks(trace))
    index = int(np.searchsorted(times, time_ns, side="right")) - 1
    return phases[index] if index >= 0 else None


def _phase_marks(trace: Trace) -> tuple[np.ndarray, list[str | None]]:
    rows = np.flatnonzero(trace.is_kind(MARK))
    texts = trace.texts_at(rows)
    kept = [i for i, text in enumerate(texts) if text in PHASES]
    times = trace.numbers_at("time_ns", rows[kept])
    order = np.argsort(times, kind="stable")
    return times[order], [PHASES[texts[kept[i]]] for i in order.tolist()]


def step_at(trace: Trace, time_ns: int) -> int | None:
    """The step running at `time_ns`: the last step mark at or before it."""
    times, numbers = step_marks(trace)
    index = np.searchsorted(times, time_ns, side="right") - 1
    return int(numbers[index]) if index >= 0 else None


def live_at(events: DeviceEvents, index: int) -> np.ndarray:
    """Indices of the allocations live just after event `index` (one whose free
    went unseen: by the rule in unseen_frees.py)."""
    allocs = np.flatnonzero(events.is_alloc[: index + 1])
    return allocs[events.ends()[allocs] > index]


def held_before_capture(events: DeviceEvents) -> int:
    """Bytes the allocator had in use before the capture's first event, by its
    own count; 0 where the trace has no such count."""
    if not events.in_use_measured or not len(events):
        return 0
    first = int(events.bytes[0]) if events.is_alloc[0] else -int(events.bytes[0])
    return max(0, int(events.heap[0]) - first)


def live_groups(
    trace: Trace, events: DeviceEvents, live: np.ndarray, sizes: np.ndarray | None = None
) -> tuple[LiveGroup, ...]:
    """The buffers `live` (indices of allocations), grouped, largest first; their
    bytes from `sizes` (per event) where given, else as the trace recorded them."""
    if not len(live):
        return ()
    rows = events.row[live]
    columns = [trace.codes_at(key, rows) for key in GROUP_KEYS]
    stacked = np.stack([codes for codes, _ in columns], axis=1)
    unique, inverse = np.unique(stacked, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    total = np.bincount(inverse, weights=(events.bytes if sizes is None else sizes)[live])
    total = total.astype(np.int64)
    count = np.bincount(inverse)
    order = np.lexsort((np.arange(len(total)), -total))
    result = []
    for g in order.tolist():
        op, region, dtype, shape, source = (
            values[c] if c >= 0 else None for c, (_, values) in zip(unique[g], columns, strict=True)
        )
        group = LiveGroup(op, region, dtype, shape, source, int(count[g]), int(total[g]))
        result.append(group)
    return tuple(result)


def peak_breakdown(trace: Trace, events: DeviceEvents) -> PeakBreakdown:
    index = int(np.argmax(events.in_use))
    live = live_at(events, index)
    groups = live_groups(trace, events, live)
    by_region: dict[str, int] = {}
    for group in groups:
        key = group.region or NO_REGION
        by_region[key] = by_region.get(key, 0) + group.bytes
    peak = int(events.in_use[index])
    stack = 0 if events.reserved is None else int(events.reserved[index])
    if stack:
        by_region[STACK] = stack
    attributed = int(events.bytes[live].sum())
    last = len(events) - 1 - int(np.argmax(events.in_use[::-1] == peak))
    phase = phase_at(trace, int(events.time_ns[index]))
    return PeakBreakdown(
        bytes=peak,
        time_ns=int(events.time_ns[index]),
        last_time_ns=int(events.time_ns[last]),
        step=None if phase else step_at(trace, int(events.time_ns[index])),
        phase=phase,
        event_index=index,
        live_buffers=len(live),
        unattributed_bytes=max(0, peak - stack - attributed),
        held_before_capture_bytes=held_before_capture(events),
        gaps_before_peak=int((events.gaps_ns[:, 1] <= events.time_ns[index]).sum()),
        stack_bytes=stack,
        groups=groups,
        by_region=tuple(sorted(by_region.items(), key=lambda kv: -kv[1])),
        stacks=stack_bytes(trace, events, live),
    )


class _Peaked(Protocol):
    @property
    def peak(self) -> PeakBreakdown: ...


Peaked = TypeVar("Peaked", bound=_Peaked)


def highest(devices: Sequence[Peaked]) -> Peaked:
    """The device whose peak is highest (the first of equal ones): the one a
    report's answer and what to change are about."""
    return max(devices, key=lambda device: device.peak.bytes)


def total_peak(devices: list[DeviceEvents]) -> tuple[int, int]:
    """(bytes, time) of the peak of the sum over devices of bytes in use."""
    if not devices:
        return 0, 0
    times = np.concatenate([d.time_ns for d in devices])
    change = np.concatenate([np.diff(d.in_use, prepend=0) for d in devices])
    order = np.argsort(times, kind="stable")
    total = np.cumsum(change[order])
    index = int(np.argmax(total))
    return int(total[index]), int(times[order][index])
