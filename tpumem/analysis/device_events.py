"""A trace's allocation events split per device, in time order, with the bytes in
use after each event: the allocator's own figure where the trace has it, else the
running sum of allocations minus frees; plus the bytes the allocator reserved
outside its heap (a TPU program's stack), which XProf's memory_profile counts in
the peak (its peak is bytes_reserved + bytes_allocated), and so does tpumem."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tpumem.analysis.allocators.unseen_frees import allocation_ends
from tpumem.trace.model import Trace
from tpumem.trace.schema import (
    ALLOC,
    ALLOCATOR,
    BUFFER,
    CAPTURE_GAP,
    CAPTURE_RESUMED,
    COUNTER,
    FREE,
    MARK,
    SAMPLE,
)


@dataclass(frozen=True, slots=True)
class DeviceEvents:
    device: str
    fidelity: str
    row: np.ndarray  # row in the trace table
    time_ns: np.ndarray
    is_alloc: np.ndarray
    bytes: np.ndarray
    requested: np.ndarray  # -1 where unknown
    buffer_id: np.ndarray  # -1 where unknown
    address: np.ndarray  # -1 where unknown
    in_use: np.ndarray  # bytes in use after each event: heap + reserved
    in_use_measured: bool  # True when in_use is the allocator's own figure
    reported_fragmentation: np.ndarray | None
    bytes_limit: int | None  # the allocator's memory limit, where reported
    # (start, end) of each stretch in which the capture saw nothing, in time order.
    gaps_ns: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    # Bytes reserved outside the heap after each event (the allocator's
    # bytes_reserved: the TPU program stack); None where the trace has none.
    reserved: np.ndarray | None = None
    # The events are the allocator's counters read now and then (split_by_device):
    # no buffer, no allocation, nothing to replay.
    counters_only: bool = False
    memo: list[np.ndarray] = field(default_factory=list, repr=False, compare=False)  # ends()

    def __len__(self) -> int:
        return len(self.time_ns)

    @property
    def heap(self) -> np.ndarray:
        """Bytes in use in the allocator's heap (buffers) after each event."""
        return self.in_use if self.reserved is None else self.in_use - self.reserved

    @property
    def has_addresses(self) -> bool:
        return bool(len(self.address)) and bool((self.address >= 0).all())

    def ends(self) -> np.ndarray:
        """Per event: for an allocation, the index of the event from which its
        buffer is no longer live (len(self) when it lives to the end); -1 for a
        free. Where the free went unseen, unseen_frees.py holds the rule; peak,
        series, address map and replay all read it from here."""
        if not self.memo:
            resumed = np.searchsorted(self.time_ns, self.gaps_ns[:, 1], side="left")
            partner = pair_events(self.is_alloc, self.buffer_id)
            heap = self.heap if self.in_use_measured else None
            self.memo.append(
                allocation_ends(self.is_alloc, partner, self.bytes, self.address, resumed, heap)
            )
        return self.memo[0]


def pair_events(is_alloc: np.ndarray, buffer_id: np.ndarray) -> np.ndarray:
    """Per event, the index of its partner: the free of an allocation, the
    allocation of a free (the nearest earlier one of the same buffer); -1 where
    there is none. Buffer ids below 0 (unknown) never pair."""
    partner = np.full(len(is_alloc), -1, dtype=np.int64)
    order = np.argsort(buffer_id, kind="stable")  # by buffer, then in time order
    ids, allocs = buffer_id[order], is_alloc[order]
    pairs = np.flatnonzero((ids[1:] == ids[:-1]) & (ids[:-1] >= 0) & allocs[:-1] & ~allocs[1:])
    first, second = order[pairs], order[pairs + 1]
    partner[first], partner[second] = second, first
    return partner


def step_marks(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """(times, step numbers) of the step marks, in time order."""
    return trace.derived("step marks", lambda: _step_marks(trace))


def _step_marks(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    rows = np.flatnonzero(trace.valid("step"))
    times = trace.numbers_at("time_ns", rows)
    order = np.argsort(times, kind="stable")
    return times[order], trace.numbers_at("step", rows)[order]


def capture_gaps(trace: Trace) -> np.ndarray:
    """(start, end) of the capture's gaps: pairs of gap and resumed marks."""
    marks = np.flatnonzero(trace.is_kind(MARK))
    if not len(marks):
        return np.zeros((0, 2), np.int64)
    times = trace.numbers("time_ns")[marks]
    text = trace.texts_at(marks)
    starts = np.sort(times[[t == CAPTURE_GAP for t in text]])
    ends = np.sort(times[[t == CAPTURE_RESUMED for t in text]])
    count = min(len(starts), len(ends))
    return np.stack([starts[:count], ends[:count]], axis=1)


def _counter_samples(trace: Trace, is_memory: np.ndarray, counted: list[str]) -> np.ndarray:
    """The sample rows of the devices named in `counted` that have no allocation
    events, as a mask over the trace's rows."""
    device_codes, device_names = trace.codes("device")
    has_events = {device_names[c] for c in np.unique(device_codes[is_memory]) if c >= 0}
    wanted = [
        code for code, name in enumerate(device_names) if name in counted and name not in has_events
    ]
    is_sample = trace.is_kind(SAMPLE) & trace.valid("bytes_in_use")
    wanted_rows: np.ndarray = is_sample & np.isin(device_codes, wanted)
    return wanted_rows


class _Columns:
    """Columns of one device's rows; no copy when they are all rows in order."""

    def __init__(self, trace: Trace, rows: np.ndarray) -> None:
        self.trace = trace
        self.rows = rows
        self.everything = len(rows) == trace.table.num_rows and bool(
            (rows == np.arange(len(rows))).all()
        )

    def numbers(self, name: str, fill: float | int) -> np.ndarray:
        if self.everything:
            return self.trace.numbers(name, fill)
        return self.trace.numbers_at(name, self.rows, fill)

    def reported(self, name: str, fill: float | int) -> np.ndarray | None:
        valid = self.trace.valid(name)
        if not (valid if self.everything else valid[self.rows]).any():
            return None
        return self.numbers(name, fill)


def split_by_device(
    trace: Trace, heap_before: Mapping[str, int] | None = None
) -> list[DeviceEvents]:
    """One DeviceEvents per device that has allocation events, sorted by name.
    `heap_before`: per device, the bytes in use summed before the trace's first
    row, where `trace` is the rest of a run read so far (a run followed live).

    A device whose capture has its counters alone (fidelity "counter": no
    allocation events, as in a TensorFlow multi-worker run) has its samples
    for events: no buffer and no bytes, the allocator's own bytes in use after
    each, so its peak is measured and none of it is said to be in a buffer."""
    is_alloc_all, is_free_all = trace.is_kind(ALLOC), trace.is_kind(FREE)
    is_memory = is_alloc_all | is_free_all
    device_codes, device_names = trace.codes("device")
    fidelity = trace.metadata.fidelity or {}
    counted = [name for name, kind in fidelity.items() if kind == COUNTER]
    if counted:
        is_memory = is_memory | _counter_samples(trace, is_memory, counted)
    if not is_memory.any():
        return []
    time_all = trace.numbers("time_ns")
    gaps = capture_gaps(trace)
    result = []
    for code in np.unique(device_codes[is_memory]):
        device_rows = trace.rows_of("device", int(code))
        rows = device_rows[is_memory[device_rows]]
        if (np.diff(time_all[rows]) < 0).any():
            rows = rows[np.argsort(time_all[rows], kind="stable")]
        columns = _Columns(trace, rows)
        is_alloc = is_alloc_all[rows]
        size = columns.numbers("bytes", 0)
        reported = columns.reported("bytes_in_use", -1)
        measured = reported is not None and bool((reported >= 0).all())
        name = device_names[code] if code >= 0 else "unknown"
        limit = columns.reported("bytes_limit", -1)
        heap = (
            reported
            if reported is not None and measured
            else np.cumsum(np.where(is_alloc, size, -size)) + (heap_before or {}).get(name, 0)
        )
        counters_only = measured and not (is_alloc_all | is_free_all)[rows].any()
        if counters_only:
            heap = _with_running_peak(heap, columns.reported("peak_bytes_in_use", -1))
        # XProf reads a missing bytes_reserved as 0, event by event: so does this.
        reserved = columns.reported("bytes_reserved", 0)
        if reserved is not None and not (reserved > 0).any():
            reserved = None
        result.append(
            DeviceEvents(
                device=name,
                fidelity=fidelity.get(name, ALLOCATOR if measured else BUFFER),
                row=rows,
                time_ns=time_all[rows],
                is_alloc=is_alloc,
                bytes=size,
                requested=columns.numbers("requested_bytes", -1),
                buffer_id=columns.numbers("buffer_id", -1),
                address=columns.numbers("address", -1),
                in_use=heap if reserved is None else heap + reserved,
                in_use_measured=measured,
                reported_fragmentation=columns.reported("fragmentation", np.nan),
                bytes_limit=int(limit.max()) if limit is not None and limit.max() > 0 else None,
                gaps_ns=gaps,
                reserved=reserved,
                counters_only=counters_only,
            )
        )
    return sorted(result, key=lambda d: d.device)


def _with_running_peak(in_use: np.ndarray, running_peak: np.ndarray | None) -> np.ndarray:
    """Readings of the bytes in use, with the allocator's running peak where it
    rose since the reading before: the allocator held that many bytes between
    the two readings, and the later one stands for it (readings a hundredth of a
    second apart miss a step's peak that the running peak keeps)."""
    if running_peak is None or not len(in_use):
        return in_use
    # Against the reading just before: a running peak the script reset (JAX's and
    # TensorFlow's reset_memory_stats) rises again from the bytes then in use.
    before = np.concatenate([[-1], running_peak[:-1]])
    return np.where(running_peak > before, np.maximum(in_use, running_peak), in_use)
