"""The allocator's MemoryAllocation / MemoryDeallocation events of one XSpace, as
columns. TensorFlow's and XLA's BFC allocators emit them (TSL's
BFCAllocator::AddTraceMe) with the stats named in NUMERIC_STATS and STRING_STATS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from tpumem.xplane.schema import messages
from tpumem.xplane.wire import FIXED64, LENGTH, Fields, as_double, as_int64, scan

ALLOCATION = "MemoryAllocation"
DEALLOCATION = "MemoryDeallocation"
NUMERIC_STATS = (
    "bytes_reserved",
    "bytes_allocated",
    "bytes_available",
    "fragmentation",
    "peak_bytes_in_use",
    "requested_bytes",
    "allocation_bytes",
    "addr",
    "id",
    "data_type",
)
STRING_STATS = ("allocator_name", "tf_op", "region_type", "shape")
STEP_STAT = "step_num"


@dataclass(slots=True)
class StatColumn:
    values: np.ndarray  # float64 or int64
    present: np.ndarray  # bool


@dataclass(slots=True)
class MemoryEvents:
    """Memory events of one XSpace, in time order."""

    hostnames: list[str]
    plane_names: list[str]
    event_names: set[str]
    time_ps: np.ndarray
    is_alloc: np.ndarray
    numeric: dict[str, StatColumn] = field(default_factory=dict)
    strings: dict[str, pa.DictionaryArray] = field(default_factory=dict)
    step_time_ps: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    step_number: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    step_name: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.time_ps)


def parse_space(data: bytes) -> Any:
    """An XSpace whose lines keep their events as raw bytes (see schema.py)."""
    space = messages("lazy")["XSpace"]()
    space.ParseFromString(data)
    return space


def _span_strings(data: bytes, starts: np.ndarray, lengths: np.ndarray) -> pa.DictionaryArray:
    """Decodes many byte spans of `data` as strings, deduplicated, in C: the spans
    become every other element of one binary array over `data`."""
    if len(starts) == 0:
        return pa.array([], pa.string()).dictionary_encode()
    order = np.argsort(starts, kind="stable")
    offsets = np.empty(2 * len(starts), dtype=np.int64)
    offsets[0::2] = starts[order]
    offsets[1::2] = starts[order] + lengths[order]
    spans = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    picked = spans.take(pa.array(np.arange(0, len(offsets) - 1, 2)))
    encoded = picked.cast(pa.large_string()).dictionary_encode()
    codes = np.empty(len(starts), dtype=np.int32)
    codes[order] = encoded.indices.to_numpy()
    return pa.DictionaryArray.from_arrays(pa.array(codes), encoded.dictionary.cast(pa.string()))


class _PlaneReader:
    """Decodes the events of one plane."""

    def __init__(self, plane: Any) -> None:
        self.plane = plane
        self.event_names = {key: meta.name for key, meta in plane.event_metadata.items()}
        self.stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        self.stat_ids: dict[str, list[int]] = {}
        for key, name in self.stat_names.items():
            self.stat_ids.setdefault(name, []).append(key)
        blobs: list[bytes] = []
        line_time_ps: list[int] = []
        counts: list[int] = []
        for line in plane.lines:
            blobs.extend(line.events)
            line_time_ps.append(line.timestamp_ns * 1000)
            counts.append(len(line.events))
        self.data = b"".join(blobs)
        self.buf = np.frombuffer(self.data, dtype=np.uint8)
        lengths = np.fromiter(map(len, blobs), dtype=np.int64, count=len(blobs))
        self.ends = np.cumsum(lengths)
        self.starts = self.ends - lengths
        self.line_time_ps = np.repeat(np.array(line_time_ps, dtype=np.int64), counts)

    def ids_of(self, names: tuple[str, ...]) -> np.ndarray:
        return np.array([k for k, v in self.event_names.items() if v in names], dtype=np.int64)

    def decode(self) -> tuple[np.ndarray, np.ndarray, Fields]:
        """Per event: metadata id and absolute time (ps); plus every event field."""
        fields = scan(self.buf, self.starts, self.ends)
        metadata_id = np.zeros(len(self.starts), dtype=np.int64)
        offset_ps = np.zeros(len(self.starts), dtype=np.int64)
        is_id = fields.number == 1
        metadata_id[fields.message[is_id]] = as_int64(fields.value[is_id])
        is_offset = fields.number == 2
        offset_ps[fields.message[is_offset]] = as_int64(fields.value[is_offset])
        return metadata_id, self.line_time_ps + offset_ps, fields

    def stats(self, stat_fields: Fields) -> Fields:
        return scan(self.buf, stat_fields.start, stat_fields.start + stat_fields.length)

    def numeric(
        self, stats: Fields, stat_id: np.ndarray, owner: np.ndarray, count: int, name: str
    ) -> StatColumn:
        """One numeric stat per event (int or double, as the profiler wrote it)."""
        values = np.zeros(count, dtype=np.float64 if name == "fragmentation" else np.int64)
        present = np.zeros(count, dtype=bool)
        for wanted_id in self.stat_ids.get(name, []):
            rows = (stat_id == wanted_id) & (stats.number > 1)
            # int64 and double values stay apart: mixing them would round ids.
            doubles = rows & (stats.wire_type == FIXED64)
            integers = rows & ~doubles
            values[owner[doubles]] = as_double(stats.value[doubles].copy())
            values[owner[integers]] = as_int64(stats.value[integers].copy())
            present[owner[rows]] = True
        return StatColumn(values, present)

    def string(
        self, stats: Fields, stat_id: np.ndarray, owner: np.ndarray, count: int, name: str
    ) -> pa.DictionaryArray:
        """One string stat per event; a string is either inline (str_value) or a
        reference to a stat metadata entry whose name is the string (ref_value)."""
        texts = np.full(count, None, dtype=object)
        for wanted_id in self.stat_ids.get(name, []):
            rows = (stat_id == wanted_id) & (stats.number > 1)
            inline = rows & (stats.wire_type == LENGTH)
            if inline.any():
                decoded = _span_strings(self.data, stats.start[inline], stats.length[inline])
                texts[owner[inline]] = decoded.to_numpy(zero_copy_only=False)
            ref = rows & (stats.number == 7)
            if ref.any():
                refs = stats.value[ref].astype(np.int64)
                unique, inverse = np.unique(refs, return_inverse=True)
                names = np.array([self.stat_names.get(int(r), "") for r in unique], dtype=object)
                texts[owner[ref]] = names[inverse]
        return pa.array(texts, type=pa.string()).dictionary_encode()


def _stat_table(
    reader: _PlaneReader, fields: Fields, owners: np.ndarray
) -> tuple[Fields, np.ndarray, np.ndarray]:
    """The stats of the events `owners` (positions in the plane): their fields, the
    metadata id of the stat each field belongs to, and the owning event's row."""
    is_stat = (fields.number == 4) & (fields.wire_type == LENGTH)
    wanted = np.zeros(len(reader.starts), dtype=bool)
    wanted[owners] = True
    stat_fields = fields.select(is_stat & wanted[fields.message])
    stats = reader.stats(stat_fields)
    stat_id = np.zeros(len(stat_fields.start), dtype=np.int64)
    is_id = stats.number == 1
    stat_id[stats.message[is_id]] = as_int64(stats.value[is_id])
    position = np.full(len(reader.starts), -1, dtype=np.int64)
    position[owners] = np.arange(len(owners))
    owner = position[stat_fields.message[stats.message]]
    return stats, stat_id[stats.message], owner


def _concat_strings(parts: list[pa.DictionaryArray], order: np.ndarray) -> pa.DictionaryArray:
    joined = pa.chunked_array(parts).unify_dictionaries().combine_chunks()
    return joined.take(pa.array(order))


def read_memory_events(space: Any) -> MemoryEvents:
    """All memory events and step marks in an XSpace, sorted by time."""
    times, allocs, numerics, strings = [], [], [], []
    step_times, step_numbers, step_names = [], [], []
    event_names: set[str] = set()
    for plane in space.planes:
        reader = _PlaneReader(plane)
        event_names.update(reader.event_names.values())
        has_steps = STEP_STAT in reader.stat_ids
        memory_ids = reader.ids_of((ALLOCATION, DEALLOCATION))
        if not len(memory_ids) and not has_steps:
            continue
        metadata_id, time_ps, fields = reader.decode()
        memory = np.flatnonzero(np.isin(metadata_id, memory_ids))
        if len(memory):
            stats, stat_id, owner = _stat_table(reader, fields, memory)
            count = len(memory)
            times.append(time_ps[memory])
            allocs.append(np.isin(metadata_id[memory], reader.ids_of((ALLOCATION,))))
            numerics.append(
                {n: reader.numeric(stats, stat_id, owner, count, n) for n in NUMERIC_STATS}
            )
            strings.append(
                {n: reader.string(stats, stat_id, owner, count, n) for n in STRING_STATS}
            )
        if has_steps:
            everything = np.arange(len(reader.starts))
            stats, stat_id, owner = _stat_table(reader, fields, everything)
            step = reader.numeric(stats, stat_id, owner, len(everything), STEP_STAT)
            marked = np.flatnonzero(step.present)
            step_times.append(time_ps[marked])
            step_numbers.append(step.values[marked])
            step_names.extend(reader.event_names.get(int(i), "") for i in metadata_id[marked])
    if times:
        time_ps = np.concatenate(times)
        order = np.argsort(time_ps, kind="stable")
        events = MemoryEvents(
            hostnames=list(space.hostnames),
            plane_names=[p.name for p in space.planes],
            event_names=event_names,
            time_ps=time_ps[order],
            is_alloc=np.concatenate(allocs)[order],
            numeric={
                n: StatColumn(
                    np.concatenate([c[n].values for c in numerics])[order],
                    np.concatenate([c[n].present for c in numerics])[order],
                )
                for n in NUMERIC_STATS
            },
            strings={n: _concat_strings([c[n] for c in strings], order) for n in STRING_STATS},
        )
    else:
        events = MemoryEvents(
            hostnames=list(space.hostnames),
            plane_names=[p.name for p in space.planes],
            event_names=event_names,
            time_ps=np.zeros(0, np.int64),
            is_alloc=np.zeros(0, bool),
        )
    if step_times:
        events.step_time_ps = np.concatenate(step_times)
        events.step_number = np.concatenate(step_numbers)
        events.step_name = step_names
    return events
