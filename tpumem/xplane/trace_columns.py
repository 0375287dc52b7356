"""Memory events of an XSpace as trace columns (trace/schema.py): shared by
`tpumem import` and the adapters that read profiler sessions as they run."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa

from tpumem.trace.schema import ALLOC, FREE, MARK
from tpumem.xplane import compiled
from tpumem.xplane.dtypes import TF_DATA_TYPES
from tpumem.xplane.memory_events import MemoryEvents

# A data_type stat's code in the dtype column's dictionary (-1: not a known type).
_DTYPE_NAMES = list(TF_DATA_TYPES.values())
_DTYPE_CODES = np.full(max(TF_DATA_TYPES) + 1, -1, dtype=np.int32)
_DTYPE_CODES[list(TF_DATA_TYPES)] = np.arange(len(TF_DATA_TYPES))


def device_of(allocator: str) -> str:
    """A device name for an allocator name (GPU_0_bfc -> GPU:0)."""
    match = re.fullmatch(r"(GPU|TPU|XPU)_(\d+)_bfc", allocator)
    if match:
        return f"{match[1]}:{match[2]}"
    # "mklcpu": TensorFlow's default CPU allocator (oneDNN's) without TF_CPU_ALLOCATOR_USE_BFC.
    if allocator in ("bfc_cpu_allocator_for_gpu", "cpu", "cpu_bfc", "mklcpu"):
        return "CPU:0"
    if allocator in ("cuda_host_bfc", "gpu_host_bfc", "xla_gpu_host_bfc"):
        return "host-pinned"
    return allocator


def pair_buffers(
    allocator_codes: np.ndarray, address: np.ndarray, is_alloc: np.ndarray
) -> np.ndarray:
    """Buffer ids for allocator events: a free takes the id of the latest earlier
    allocation at the same address in the same allocator; ids are the allocation's
    row. -1 for a free whose allocation happened before the capture began."""
    if compiled.available():
        known = allocator_codes == allocator_codes  # (NaN: no allocator)
        codes = np.where(known, allocator_codes, -1).astype(np.int64)
        return compiled.pair_buffers(codes, address, is_alloc)
    return _pair_in_numpy(allocator_codes, address, is_alloc)


def _pair_in_numpy(
    allocator_codes: np.ndarray, address: np.ndarray, is_alloc: np.ndarray
) -> np.ndarray:
    """pair_buffers from the rows grouped by place (where the C kernels are not
    built): each free after an allocation in its group takes that allocation's row."""
    rows = np.arange(len(address))
    order = np.lexsort((rows, address, allocator_codes))
    ids = np.where(is_alloc, rows, -1)
    sorted_ids = ids[order]
    previous_same = np.zeros(len(order), dtype=bool)
    previous_same[1:] = (allocator_codes[order][1:] == allocator_codes[order][:-1]) & (
        address[order][1:] == address[order][:-1]
    )
    free_rows = np.flatnonzero(~is_alloc[order] & previous_same)
    preceding_alloc = is_alloc[order][free_rows - 1]
    sorted_ids[free_rows[preceding_alloc]] = sorted_ids[free_rows[preceding_alloc] - 1]
    ids[order] = sorted_ids
    return ids


def _column(events: MemoryEvents, name: str) -> np.ma.MaskedArray:
    stat = events.numeric[name]
    return np.ma.MaskedArray(stat.values, mask=~stat.present)


def allocator_codes(events: MemoryEvents) -> np.ndarray:
    return events.strings["allocator_name"].indices.to_numpy(zero_copy_only=False)


def trace_columns(events: MemoryEvents, origin_ps: int, buffer_id: np.ndarray) -> dict[str, object]:
    """Trace columns for the memory events, with times relative to `origin_ps` and
    the given buffer ids (-1: unknown)."""
    allocator = events.strings["allocator_name"]
    devices = pa.array([device_of(a) for a in allocator.dictionary.to_pylist()], pa.string())
    allocated = _column(events, "bytes_allocated")
    reserved = _column(events, "bytes_reserved")
    # BFC reports bytes_available = memory_limit - reserved - in_use.
    limit = _column(events, "bytes_available") + reserved.filled(0) + allocated
    dtype = events.numeric["data_type"]
    known = dtype.present & (dtype.values >= 0) & (dtype.values < len(_DTYPE_CODES))
    dtype_code = np.where(known, _DTYPE_CODES[np.where(known, dtype.values, 0)], -1)
    return {
        "kind": pa.DictionaryArray.from_arrays(
            pa.array(np.where(events.is_alloc, 0, 1).astype(np.int8)), pa.array([ALLOC, FREE])
        ),
        "time_ns": (events.time_ps - origin_ps) // 1000,
        "device": pa.DictionaryArray.from_arrays(allocator.indices, devices),
        "allocator": allocator,
        "buffer_id": np.ma.MaskedArray(buffer_id, mask=buffer_id < 0),
        "address": _column(events, "addr"),
        "bytes": _column(events, "allocation_bytes"),
        "requested_bytes": _column(events, "requested_bytes"),
        "op": events.strings["tf_op"],
        "region": events.strings["region_type"],
        "dtype": pa.DictionaryArray.from_arrays(  # (made here: encoding strings costs more)
            pa.array(dtype_code, mask=dtype_code < 0),
            pa.array(_DTYPE_NAMES, pa.string()),
        ),
        "shape": events.strings["shape"],
        "bytes_in_use": allocated,
        "bytes_reserved": reserved,
        "bytes_limit": limit,
        "peak_bytes_in_use": _column(events, "peak_bytes_in_use"),
        # BFC divides by the free bytes, which are 0 when its pool is exactly full:
        # it writes NaN there, where the definition (and XProf) give 0.
        "fragmentation": np.ma.MaskedArray(
            np.nan_to_num(events.numeric["fragmentation"].values, nan=0.0),
            mask=~events.numeric["fragmentation"].present,
        ),
    }


def mark_columns(events: MemoryEvents, origin_ps: int) -> tuple[dict[str, object], int]:
    """Trace columns for the step marks (`step_num` stats) of the same XSpace."""
    count = len(events.step_time_ps)
    columns = {
        "kind": [MARK] * count,
        "time_ns": (events.step_time_ps - origin_ps) // 1000,
        "step": events.step_number.astype(np.int64),
        "text": events.step_name,
    }
    return columns, count
