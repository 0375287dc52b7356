"""A trace as an XSpace that XProf's memory_profile tool renders.

XProf reads `MemoryAllocation` / `MemoryDeallocation` events on a plane named
`/host:CPU`, keyed by the stat `allocator_name`, integers as int64 values and
fragmentation as a double (docs/tensorboard.md). Its peak is
bytes_reserved + bytes_allocated; its capacity adds bytes_available. So each
event carries: bytes_allocated = tpumem's heap bytes in use after it,
bytes_reserved = the bytes reserved outside the heap (a TPU program's stack, 0
for most traces), bytes_available = the pool (or the limit) minus bytes in use where known,
fragmentation = tpumem's figure (0 where it has none), and the buffer's op,
region, dtype (TF's DataType number) and shape. XProf pairs a free with its
allocation by address: a trace without addresses gets a synthetic one per
buffer, unique and stable (derived from the buffer id). The allocator is named
after tpumem's device, one line per device, all lines sharing one timestamp.
Compiled programs the trace recorded go on the plane `/host:metadata`, as TSL's
profilers put them (hlo_protos.py), for XProf's memory_viewer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tpumem.analysis.trace_figures import DeviceEventFigures
from tpumem.hlo.schema import HloError, parse_hlo_proto
from tpumem.trace.hlo_rows import hlo_rows
from tpumem.trace.model import Trace
from tpumem.xplane import encode as pb
from tpumem.xplane.dtypes import TF_DATA_TYPES
from tpumem.xplane.hlo_protos import metadata_plane
from tpumem.xplane.memory_events import ALLOCATION as ALLOCATION_EVENT
from tpumem.xplane.memory_events import DEALLOCATION as DEALLOCATION_EVENT
from tpumem.xplane.schema import messages

PLANE = "/host:CPU"
ALLOCATION, DEALLOCATION = 1, 2  # event metadata ids
STATS = (
    "allocator_name",
    "bytes_reserved",
    "bytes_allocated",
    "bytes_available",
    "fragmentation",
    "peak_bytes_in_use",
    "requested_bytes",
    "allocation_bytes",
    "addr",
    "tf_op",
    "region_type",
    "data_type",
    "shape",  # the name TSL gives kTensorShapes
)
STAT_ID = {name: number for number, name in enumerate(STATS, start=1)}
# Addresses made up for buffers whose real one is unknown: above any real one.
SYNTHETIC_BASE = 1 << 56
CHUNK = 200_000  # events encoded at a time (bounds the byte matrices' memory)
_DTYPE_NUMBER = {name: number for number, name in TF_DATA_TYPES.items()}


class _Strings:
    """Strings as stat metadata, so events refer to them by id (ref_value)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def id(self, text: str) -> int:
        if text not in self.ids:
            self.ids[text] = len(STATS) + 1 + len(self.ids)
        return self.ids[text]

    def column(self, trace: Trace, name: str, rows: np.ndarray) -> np.ndarray:
        codes, values = trace.codes(name)
        lookup = np.array([self.id(v) for v in values] + [self.id("")], np.int64)
        return lookup[codes[rows]]  # code -1 (none) takes the last: ""


def _dtype_numbers(trace: Trace, rows: np.ndarray) -> np.ndarray:
    codes, values = trace.codes("dtype")
    lookup = np.array([_DTYPE_NUMBER.get(v, 0) for v in values] + [0], np.int64)
    return lookup[codes[rows]]


def _columns(trace: Trace, device: DeviceEventFigures, strings: _Strings) -> dict:
    events = device.events
    in_use, heap = events.in_use.astype(np.int64), events.heap.astype(np.int64)
    pool, limit = device.pool, device.analysis.preallocation.limit_bytes
    if pool is not None and len(pool) == len(events):
        available = np.maximum(pool - in_use, 0)
    elif pool is not None and len(pool):
        available = np.maximum(int(pool.max()) - in_use, 0)
    elif limit is not None:
        available = np.maximum(limit - in_use, 0)
    else:
        available = np.zeros(len(events), np.int64)
    synthetic = np.where(
        events.buffer_id >= 0, SYNTHETIC_BASE + events.buffer_id, SYNTHETIC_BASE - 1 - events.row
    )
    return {
        "metadata": np.where(events.is_alloc, ALLOCATION, DEALLOCATION),
        "offset_ps": events.time_ns * 1000,
        "allocator_name": np.full(len(events), strings.id(events.device), np.int64),
        "bytes_reserved": in_use - heap,
        "bytes_allocated": heap,
        "bytes_available": available,
        "fragmentation": np.nan_to_num(device.fragmentation, nan=0.0),
        "peak_bytes_in_use": np.maximum.accumulate(heap),
        "requested_bytes": np.where(events.requested >= 0, events.requested, events.bytes),
        "allocation_bytes": events.bytes,
        "addr": np.where(events.address >= 0, events.address, synthetic),
        "tf_op": strings.column(trace, "op", events.row),
        "region_type": strings.column(trace, "region", events.row),
        "data_type": _dtype_numbers(trace, events.row),
        "shape": strings.column(trace, "shape", events.row),
    }


_REFS = ("allocator_name", "tf_op", "region_type", "shape")


def _stat(name: str, values: np.ndarray) -> np.ndarray:
    head = pb.tag(1, pb.VARINT) + pb.varint_bytes(STAT_ID[name])
    value: list[bytes | np.ndarray]
    if name == "fragmentation":
        value = [pb.tag(2, pb.FIXED64), pb.doubles(values)]
    elif name in _REFS:
        value = [pb.tag(7, pb.VARINT), pb.varints(values)]
    else:
        value = [pb.tag(4, pb.VARINT), pb.varints(values)]
    return pb.field(4, pb.record(len(values), [head, *value]))  # XEvent.stats


def _events(columns: dict, start: int, stop: int) -> bytes:
    rows = stop - start
    part = {name: values[start:stop] for name, values in columns.items()}
    body = pb.record(
        rows,
        [
            pb.tag(1, pb.VARINT),
            pb.varints(part["metadata"]),
            pb.tag(2, pb.VARINT),
            pb.varints(part["offset_ps"]),
            *(_stat(name, part[name]) for name in STATS),
        ],
    )
    return pb.field(4, body).tobytes()  # XLine.events


def trace_programs(trace: Trace) -> list[tuple[int, str, bytes]]:
    """(program id, module name, HloProto bytes) of each compiled program the
    trace recorded; the id is XLA's where the trace has it, else the module's."""
    programs = []
    for row in hlo_rows(trace):
        if row is None:
            continue
        try:
            module = parse_hlo_proto(row.data).hlo_module
        except HloError:
            continue
        program_id = row.program_id if row.program_id is not None else module.id
        programs.append((program_id, module.name, row.data))
    return programs


def memory_space(
    trace: Trace,
    host: str,
    figures: list[DeviceEventFigures],
    programs: Sequence[tuple[int, str, bytes]] = (),
) -> bytes:
    """The XSpace bytes of a trace's memory events, for `<host>.xplane.pb`;
    `figures`: its devices' analysis (analysis/trace_figures.py), made once;
    `programs`: compiled programs for XProf's memory_viewer (trace_programs)."""
    m = messages("full")
    strings = _Strings()
    start_ns = trace.metadata.start_time_ns or 0
    lines = []
    for number, device in enumerate(figures, start=1):
        columns = _columns(trace, device, strings)
        head = m["XLine"](id=number, name=device.events.device, timestamp_ns=start_ns)
        body = b"".join(
            _events(columns, at, min(at + CHUNK, len(device.events)))
            for at in range(0, len(device.events), CHUNK)
        )
        lines.append(head.SerializeToString() + body)
    plane = m["XPlane"](id=1, name=PLANE)
    for name, number in ((n, i) for n, i in STAT_ID.items()):
        plane.stat_metadata[number].id = number
        plane.stat_metadata[number].name = name
    for text, number in strings.ids.items():
        plane.stat_metadata[number].id = number
        plane.stat_metadata[number].name = text
    for number, name in ((ALLOCATION, ALLOCATION_EVENT), (DEALLOCATION, DEALLOCATION_EVENT)):
        plane.event_metadata[number].id = number
        plane.event_metadata[number].name = name
    plane_bytes = plane.SerializeToString() + b"".join(
        pb.tag(3, pb.LENGTH) + pb.varint_bytes(len(line)) + line for line in lines
    )
    space = m["XSpace"](hostnames=[host]).SerializeToString()
    if programs:
        metadata = metadata_plane(list(programs), plane_id=2)
        space = pb.tag(1, pb.LENGTH) + pb.varint_bytes(len(metadata)) + metadata + space
    return pb.tag(1, pb.LENGTH) + pb.varint_bytes(len(plane_bytes)) + plane_bytes + space
