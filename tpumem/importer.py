"""`tpumem import`: XSpace profiles (one `.xplane.pb` per host) into trace files."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from tpumem.errors import TpumemError
from tpumem.trace.schema import ALLOC, ALLOCATOR, FREE, MARK
from tpumem.trace.writer import TraceWriter
from tpumem.xplane.dtypes import TF_DATA_TYPES
from tpumem.xplane.memory_events import MemoryEvents, parse_space, read_memory_events
from tpumem.xplane.wire import WireError

XPLANE_SUFFIX = ".xplane.pb"
NO_EVENTS_HELP = (
    "TensorFlow records them on CPU only when TF_CPU_ALLOCATOR_USE_BFC=true is set "
    "before it starts (on GPU and TPU always); JAX and PyTorch/XLA record none on CPU"
)


@dataclass(frozen=True, slots=True)
class HostProfile:
    host: str
    path: Path


def find_profiles(path: Path, run: str | None = None) -> tuple[str, list[HostProfile]]:
    """The run name and its per-host xplane files. A directory may be a logdir
    (plugins/profile/<run>/<host>.xplane.pb), a profile directory, or a run."""
    if not path.exists():
        raise TpumemError(f"{path}: no such file or directory")
    if path.is_file():
        host = path.name.removesuffix(XPLANE_SUFFIX).removesuffix(".pb")
        return host, [HostProfile(host, path)]
    files = sorted(path.rglob(f"*{XPLANE_SUFFIX}"))
    if not files:
        raise TpumemError(
            f"{path}: no *{XPLANE_SUFFIX} profiles under it "
            "(a logdir holds plugins/profile/<run>/<host>.xplane.pb)"
        )
    runs: dict[Path, list[Path]] = {}
    for file in files:
        runs.setdefault(file.parent, []).append(file)
    if run is not None:
        chosen = [d for d in runs if d.name == run]
        if not chosen:
            names = ", ".join(sorted(d.name for d in runs))
            raise TpumemError(f"{path}: no run named {run!r} (runs: {names})")
        directory = chosen[0]
    else:
        # XProf names runs by their start time, so the last name is the newest.
        directory = max(runs, key=lambda d: d.name)
    hosts = [HostProfile(f.name.removesuffix(XPLANE_SUFFIX), f) for f in runs[directory]]
    return directory.name, hosts


def device_of(allocator: str) -> str:
    """A device name for an allocator name (GPU_0_bfc -> GPU:0)."""
    match = re.fullmatch(r"(GPU|TPU|XPU)_(\d+)_bfc", allocator)
    if match:
        return f"{match[1]}:{match[2]}"
    if allocator in ("bfc_cpu_allocator_for_gpu", "cpu", "cpu_bfc"):
        return "CPU:0"
    if allocator in ("cuda_host_bfc", "gpu_host_bfc"):
        return "host-pinned"
    return allocator


def guess_framework(events: MemoryEvents) -> str:
    names = " ".join(sorted(events.event_names))
    # Names only one framework's runtime emits; XLA's own names are shared by all.
    if "TFE_" in names or "EagerExecute" in names or "KernelAndDeviceFunc" in names:
        return "tensorflow"
    if "PjitFunction" in names or "jax" in names.lower():
        return "jax"
    if "torch_xla" in names or "XLATensor" in names:
        return "torch_xla"
    return "unknown"


def pair_buffers(
    allocator_codes: np.ndarray, address: np.ndarray, is_alloc: np.ndarray
) -> np.ndarray:
    """Buffer ids for allocator events: a free takes the id of the latest earlier
    allocation at the same address in the same allocator; ids are the allocation's
    row. -1 for a free whose allocation happened before the capture began."""
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


def trace_columns(events: MemoryEvents, origin_ps: int) -> dict[str, object]:
    """Trace columns for the memory events (see trace/schema.py)."""
    allocator = events.strings["allocator_name"]
    allocator_codes = allocator.indices.to_numpy(zero_copy_only=False)
    devices = pa.array([device_of(a) for a in allocator.dictionary.to_pylist()], pa.string())
    address = events.numeric["addr"].values
    buffer_id = pair_buffers(allocator_codes, address, events.is_alloc)
    allocated = _column(events, "bytes_allocated")
    reserved = _column(events, "bytes_reserved")
    # BFC reports bytes_available = memory_limit - reserved - in_use.
    limit = _column(events, "bytes_available") + reserved.filled(0) + allocated
    dtype = events.numeric["data_type"]
    dtype_names = np.array([None, *TF_DATA_TYPES.values()], dtype=object)
    dtype_index = np.zeros(len(dtype.values), dtype=np.int64)
    known = dtype.present & np.isin(dtype.values, list(TF_DATA_TYPES))
    dtype_index[known] = np.searchsorted(list(TF_DATA_TYPES), dtype.values[known]) + 1
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
        "dtype": pa.array(dtype_names[dtype_index], pa.string()),
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


def read_profile(profile: HostProfile) -> MemoryEvents:
    try:
        data = profile.path.read_bytes()
    except OSError as error:
        raise TpumemError(f"{profile.path}: cannot read: {error.strerror}") from None
    if not data:
        raise TpumemError(f"{profile.path}: empty file, not an XSpace profile")
    try:
        return read_memory_events(parse_space(data))
    except (DecodeError, WireError) as error:
        raise TpumemError(
            f"{profile.path}: not a readable XSpace profile (corrupt or truncated: {error})"
        ) from None


def import_profile(profile: HostProfile, output: Path, run: str) -> int:
    """Writes one host's memory events as a trace; returns the event count."""
    events = read_profile(profile)
    if len(events) == 0:
        raise TpumemError(
            f"{profile.path}: no MemoryAllocation/MemoryDeallocation events: {NO_EVENTS_HELP}"
        )
    origin_ps = int(min(events.time_ps[0], events.step_time_ps.min(initial=events.time_ps[0])))
    columns = trace_columns(events, origin_ps)
    devices = sorted(set(columns["device"].dictionary.to_pylist()))  # type: ignore[attr-defined]
    metadata = {
        "framework": guess_framework(events),
        "backend": "gpu"
        if any(d.startswith("GPU") for d in devices)
        else ("tpu" if any(d.startswith("TPU") for d in devices) else "cpu"),
        "source": "import",
        "imported_from": str(profile.path),
        "run": run,
        "host": events.hostnames[0] if events.hostnames else profile.host,
        "xspace_planes": events.plane_names,
        "fidelity": {device: ALLOCATOR for device in devices},
        "start_time_ns": 0,
        "warnings": [],
    }
    with TraceWriter(output, metadata, flush_interval_s=0) as writer:
        writer.write_columns(columns, len(events))
        if len(events.step_time_ps):
            writer.write_columns(
                {
                    "kind": [MARK] * len(events.step_time_ps),
                    "time_ns": (events.step_time_ps - origin_ps) // 1000,
                    "step": events.step_number.astype(np.int64),
                    "text": events.step_name,
                },
                len(events.step_time_ps),
            )
    return len(events)
