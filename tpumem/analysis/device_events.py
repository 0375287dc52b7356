"""A trace's allocation events split per device, in time order, with the bytes in
use after each event: the allocator's own figure where the trace has it, else the
running sum of allocations minus frees."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tpumem.trace.model import Trace
from tpumem.trace.schema import ALLOC, ALLOCATOR, BUFFER, FREE


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
    in_use: np.ndarray  # bytes in use after each event
    in_use_measured: bool  # True when in_use is the allocator's own figure
    reported_fragmentation: np.ndarray | None
    bytes_limit: np.ndarray | None

    def __len__(self) -> int:
        return len(self.time_ns)

    @property
    def has_addresses(self) -> bool:
        return bool(len(self.address)) and bool((self.address >= 0).all())

    def free_index(self) -> np.ndarray:
        """For each event that allocates, the index of the event that frees the same
        buffer (len(self) when it is never freed); -1 for frees."""
        n = len(self)
        result = np.full(n, -1, dtype=np.int64)
        allocs = np.flatnonzero(self.is_alloc)
        result[allocs] = n
        frees = np.flatnonzero(~self.is_alloc & (self.buffer_id >= 0))
        if len(allocs) and len(frees):
            ids = self.buffer_id[allocs]
            order = np.argsort(ids, kind="stable")
            where = np.searchsorted(ids[order], self.buffer_id[frees])
            where = np.minimum(where, len(order) - 1)
            match = ids[order][where] == self.buffer_id[frees]
            alloc_at = allocs[order][where[match]]
            freed_at = frees[match]
            later = freed_at > alloc_at
            result[alloc_at[later]] = freed_at[later]
        return result


def _masked(trace: Trace, name: str, rows: np.ndarray, fill: float | int) -> np.ndarray | None:
    valid = trace.valid(name)[rows]
    if not valid.any():
        return None
    return trace.numbers(name, fill)[rows]


def split_by_device(trace: Trace) -> list[DeviceEvents]:
    """One DeviceEvents per device that has allocation events, sorted by name."""
    table = trace.table
    kinds = table.column("kind").cast(pa.string())
    is_alloc_all = pc.equal(kinds, ALLOC).to_numpy(zero_copy_only=False)
    is_free_all = pc.equal(kinds, FREE).to_numpy(zero_copy_only=False)
    memory_rows = np.flatnonzero(is_alloc_all | is_free_all)
    if not len(memory_rows):
        return []
    device_codes, device_names = trace.codes("device")
    time_all = trace.numbers("time_ns")
    fidelity = trace.metadata.get("fidelity", {})
    result = []
    codes = device_codes[memory_rows]
    for code in np.unique(codes):
        rows = memory_rows[codes == code]
        rows = rows[np.argsort(time_all[rows], kind="stable")]
        is_alloc = is_alloc_all[rows]
        size = trace.numbers("bytes")[rows]
        derived = np.cumsum(np.where(is_alloc, size, -size))
        reported = _masked(trace, "bytes_in_use", rows, -1)
        measured = reported is not None and bool((reported >= 0).all())
        name = device_names[code] if code >= 0 else "unknown"
        address = trace.numbers("address", -1)[rows]
        result.append(
            DeviceEvents(
                device=name,
                fidelity=fidelity.get(name, ALLOCATOR if measured else BUFFER),
                row=rows,
                time_ns=time_all[rows],
                is_alloc=is_alloc,
                bytes=size,
                requested=trace.numbers("requested_bytes", -1)[rows],
                buffer_id=trace.numbers("buffer_id", -1)[rows],
                address=address,
                in_use=reported if measured else derived,
                in_use_measured=measured,
                reported_fragmentation=_masked(trace, "fragmentation", rows, np.nan),
                bytes_limit=_masked(trace, "bytes_limit", rows, -1),
            )
        )
    return sorted(result, key=lambda d: d.device)
