"""The allocator's MemoryAllocation / MemoryDeallocation events of one XSpace, as
columns. TensorFlow's and XLA's BFC allocators emit them (TSL's
BFCAllocator::AddTraceMe) with the stats named in NUMERIC_STATS and STRING_STATS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from tpumem.xplane import compiled
from tpumem.xplane.event_spans import Lines, first_events, place_events
from tpumem.xplane.on_threads import on_threads
from tpumem.xplane.regular_stats import DOUBLE, REF, STRING, RegularStats, decode_regular
from tpumem.xplane.schema import messages
from tpumem.xplane.wire import (
    FIXED64,
    LENGTH,
    Stats,
    WireError,
    as_double,
    as_int64,
    read_varints,
    scan_embedded,
    scan_leading,
    scan_stats,
)

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
TASK_ENVIRONMENT = "Task Environment"  # the plane TSL writes the session's times on


@dataclass(slots=True)
class StatColumn:
    values: np.ndarray  # float64 or int64
    present: np.ndarray  # bool

    @staticmethod
    def empty(name: str, count: int) -> StatColumn:
        """A column for `count` events, nothing present: fragmentation is a double,
        every other stat an int64 (ids and addresses a double would round)."""
        dtype = np.float64 if name == "fragmentation" else np.int64
        return StatColumn(np.zeros(count, dtype), np.zeros(count, bool))


@dataclass(frozen=True, slots=True)
class StatTable:
    """Decoded stats of some events: `owner` is each stat's event (0..count-1)."""

    stats: Stats
    owner: np.ndarray
    count: int
    named: np.ndarray | None  # per stat, the code of its name (see _PlaneReader)


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
    # When the profiler session began (ns since the epoch), from the "Task
    # Environment" plane; event times are relative to it. None in older profiles.
    profile_start_ns: int | None = None
    profile_stop_ns: int | None = None

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
        wanted = (*NUMERIC_STATS, *STRING_STATS, STEP_STAT)
        self.name_codes = {name: code for code, name in enumerate(wanted, start=1)}
        # stat id -> code of a stat tpumem reads (0: any other), when ids are small.
        largest = max(self.stat_names, default=0)
        self.id_codes: np.ndarray | None = None
        self.ids: np.ndarray | None = None  # every event's metadata id, where walked in C
        if min(self.stat_names, default=0) >= 0 and largest < 1 << 24:
            self.id_codes = np.zeros(largest + 1, dtype=np.int8)
            for name, code in self.name_codes.items():
                self.id_codes[self.stat_ids.get(name, [])] = code

    def wanted(self) -> bool:
        """Whether the plane has memory events or step marks: only then are its
        events, possibly millions of GPU kernels, read at all."""
        return bool(len(self.ids_of((ALLOCATION, DEALLOCATION)))) or STEP_STAT in self.stat_ids

    def load_events(self, base_ns: int, data: bytes, first: Lines) -> None:
        """Each event's span: in `data`, the profile's bytes, where every line's
        events were found in place (event_spans.py), else in a buffer of the
        plane's events copied out and joined. Times from `base_ns` (lines may carry
        nanoseconds since the epoch, which picoseconds in an int64 cannot hold)."""
        plane = self.plane
        self.line_time_ps = np.array(
            [(line.timestamp_ns - base_ns) * 1000 for line in plane.lines], dtype=np.int64
        )
        self.data, self.buf = data, np.frombuffer(data, dtype=np.uint8)
        if compiled.available() and self._walk_lines(first):
            return
        lengths = [
            np.fromiter(map(len, line.events), dtype=np.int64, count=len(line.events))
            for line in plane.lines
        ]
        self.line_ends = np.cumsum([len(part) for part in lengths], dtype=np.int64)
        placed = [
            place_events(self.buf, where, part) if where is not None and len(part) else None
            for where, part in zip(first, lengths, strict=False)
        ]
        if len(first) == len(lengths) and all(
            p is not None for p, part in zip(placed, lengths, strict=True) if len(part)
        ):
            spans = [p for p in placed if p is not None]
            self.starts = np.concatenate([s for s, _ in spans]) if spans else np.zeros(0, np.int64)
            self.ends = np.concatenate([e for _, e in spans]) if spans else np.zeros(0, np.int64)
            return
        self.data = b"".join(b"".join(line.events) for line in plane.lines)
        self.buf = np.frombuffer(self.data, dtype=np.uint8)
        every = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
        self.ends = np.cumsum(every)
        self.starts = self.ends - every

    def _walk_lines(self, first: Lines) -> bool:
        """The events' spans and metadata ids walked in C from each line's first
        event, where every line holds as many as upb found (else False)."""
        lines = self.plane.lines
        if len(first) != len(lines):
            return False
        found = []
        for where, line in zip(first, lines, strict=True):
            if where is None:
                if len(line.events):
                    return False
                continue
            events = compiled.line_events(self.buf, *where, most=len(line.events))
            if events is None or len(events.starts) != len(line.events):
                return False
            found.append(events)
        self.line_ends = np.cumsum([len(line.events) for line in lines], dtype=np.int64)
        self.starts = np.concatenate([e.starts for e in found]) if found else np.zeros(0, np.int64)
        self.ends = np.concatenate([e.ends for e in found]) if found else np.zeros(0, np.int64)
        self.ids = np.concatenate([e.ids for e in found]) if found else np.zeros(0, np.uint64)
        return True

    def line_times(self, events: np.ndarray) -> np.ndarray:
        """The start time (ps) of each event's line."""
        return self.line_time_ps[np.searchsorted(self.line_ends, events, side="right")]

    def ids_of(self, names: tuple[str, ...]) -> np.ndarray:
        return np.array([k for k, v in self.event_names.items() if v in names], dtype=np.int64)

    def metadata_ids(self) -> np.ndarray:
        """Every event's metadata id: its first field, as protobuf writes fields
        in number order. Enough to tell memory events from the rest."""
        if self.ids is not None:  # (walked in C with the spans)
            return as_int64(self.ids)
        ids = np.zeros(len(self.starts), dtype=np.uint64)
        if not len(self.buf):
            return ids.view(np.int64)
        # A field 1 (tag 0x08) comes first where there is one; an id of 0 is left out.
        first = self.buf[np.minimum(self.starts, len(self.buf) - 1)]
        has = np.flatnonzero((self.starts < self.ends) & (first == 0x08))
        for chunk in range(0, len(has), CHUNK_EVENTS * 8):
            rows = has[chunk : chunk + CHUNK_EVENTS * 8]
            ids[rows], after = read_varints(self.buf, self.starts[rows] + 1)
            if (after > self.ends[rows]).any():
                raise WireError("an event's metadata id runs past the end of the event")
        return as_int64(ids)

    def headers(self, events: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For some events: absolute time (ps) and where their stats begin."""
        leading, rest = scan_leading(self.buf, self.starts[events], self.ends[events], (1, 2, 3))
        return self.line_times(events) + as_int64(leading[2]), rest

    def rows_of(self, table: StatTable, name: str) -> np.ndarray:
        """The stats named `name`, through a table from stat id to a small code."""
        ids = self.stat_ids.get(name, [])
        if not ids:
            return np.zeros(0, dtype=np.int64)
        if table.named is None:
            return np.flatnonzero(np.isin(table.stats.metadata_id, ids))
        code = self.name_codes[name]
        return np.flatnonzero(table.named == code)

    def numeric(
        self,
        table: StatTable,
        name: str,
        into: StatColumn | None = None,
        rows: np.ndarray | None = None,
    ) -> StatColumn:
        """One numeric stat per event (int or double, as the profiler wrote it),
        written into `into` (the table's events at `rows` of it) where given."""
        stats = table.stats
        if into is None:
            into = StatColumn.empty(name, table.count)
        found = self.rows_of(table, name)
        owner = table.owner if rows is None else rows[table.owner]
        # int64 and double values stay apart: mixing them would round ids.
        doubles = found[stats.wire_type[found] == FIXED64]
        integers = found[stats.wire_type[found] != FIXED64]
        into.values[owner[doubles]] = as_double(stats.value[doubles].copy())
        into.values[owner[integers]] = as_int64(stats.value[integers].copy())
        into.present[owner[found]] = True
        return into

    def read_events(
        self, events: np.ndarray, workers: int = 1
    ) -> tuple[np.ndarray, dict[str, StatColumn], dict[str, _Words]]:
        """Some events' times and their NUMERIC_STATS and STRING_STATS, decoded a
        chunk of events at a time (on `workers` threads): the decoder's arrays stay
        small (in the CPU's caches, and a 1 GB profile needs no more memory than its
        columns)."""
        count = len(events)
        time_ps = np.empty(count, dtype=np.int64)
        numeric = {name: StatColumn.empty(name, count) for name in NUMERIC_STATS}
        spans = {name: _StringSpans(count) for name in STRING_STATS}
        codes = len(self.name_codes) + 1

        id_codes = self.id_codes
        # The C kernels where they were built, else the numpy decoder.
        c_codes = id_codes if id_codes is not None and compiled.available() else None
        if c_codes is not None:
            columns = (compiled.Column * codes)()
            for name, column in numeric.items():
                columns[self.name_codes[name]] = compiled.numeric_column(
                    column.values, column.present
                )
            for name, found in spans.items():
                columns[self.name_codes[name]] = compiled.string_column(
                    found.ref, found.start, found.length
                )

        def decode(first: int) -> None:  # (each chunk writes its own rows only)
            chunk = events[first : first + CHUNK_EVENTS]
            rows = np.arange(first, first + len(chunk))
            if c_codes is not None:
                offset, irregular = compiled.decode_events(
                    self.buf, self.starts[chunk], self.ends[chunk], c_codes, columns, first
                )
                time_ps[rows] = self.line_times(chunk) + offset
                odd = np.flatnonzero(irregular)
                chunk, rows = chunk[odd], rows[odd]
            elif id_codes is not None:
                time_ps[rows], rest = self.headers(chunk)
                regular = decode_regular(self.buf, rest, self.ends[chunk], id_codes, codes)
                for name, column in numeric.items():
                    _numeric_from(regular, self.name_codes[name], column, rows)
                for name, found in spans.items():
                    found.add_regular(regular, self.name_codes[name], rows)
                odd = np.flatnonzero(regular.irregular)
                chunk, rows = chunk[odd], rows[odd]
            if len(chunk):  # what the regular decoder did not read, read in general
                time_ps[rows], rest = self.headers(chunk)
                table = _stat_table(self, chunk, rest)
                for name, column in numeric.items():
                    self.numeric(table, name, column, rows)
                for name, found in spans.items():
                    found.add(self, table, name, rows[table.owner])

        on_threads(decode, list(range(0, count, CHUNK_EVENTS)), workers)
        strings = {name: found.strings(self.data, self.stat_names) for name, found in spans.items()}
        return time_ps, numeric, strings


def _numeric_from(regular: RegularStats, code: int, into: StatColumn, rows: np.ndarray) -> None:
    tag = regular.tag[code]
    present = np.flatnonzero(tag)
    raw = np.where(tag[present] == STRING, 0, regular.value[code, present])  # (as in general)
    doubles = tag[present] == DOUBLE
    into.values[rows[present[doubles]]] = as_double(raw[doubles])
    into.values[rows[present[~doubles]]] = as_int64(raw[~doubles])
    into.present[rows[present]] = True


CHUNK_EVENTS = 1 << 15


class _StringSpans:
    """One string stat per event, gathered a chunk at a time: a string is either
    inline (str_value: where its bytes are) or a reference to a stat metadata entry
    whose name is the string (ref_value)."""

    def __init__(self, count: int) -> None:
        self.ref = np.full(count, -1, dtype=np.int64)
        self.start = np.zeros(count, dtype=np.int64)
        self.length = np.full(count, -1, dtype=np.int64)

    def add(self, reader: _PlaneReader, table: StatTable, name: str, owner: np.ndarray) -> None:
        """The table's stats `name`, each for its event's row `owner` (per stat)."""
        stats = table.stats
        found = reader.rows_of(table, name)
        ref = found[stats.number[found] == 7]
        self.ref[owner[ref]] = stats.value[ref].astype(np.int64)
        inline = found[stats.wire_type[found] == LENGTH]
        self.start[owner[inline]] = stats.start[inline]
        self.length[owner[inline]] = stats.length[inline]

    def add_regular(self, regular: RegularStats, code: int, rows: np.ndarray) -> None:
        tag = regular.tag[code]
        ref = np.flatnonzero(tag == REF)
        self.ref[rows[ref]] = regular.value[code, ref].astype(np.int64)
        inline = np.flatnonzero(tag == STRING)
        self.start[rows[inline]] = regular.value[code, inline].astype(np.int64)
        self.length[rows[inline]] = regular.length[code, inline]

    def strings(self, data: bytes, stat_names: dict[int, str]) -> _Words:
        codes = np.full(len(self.ref), -1, dtype=np.int32)
        words: list[str] = []
        ref = np.flatnonzero(self.ref >= 0)
        if len(ref):
            unique, inverse = _small_unique(self.ref[ref])
            words = [stat_names.get(int(r), "") for r in unique]
            codes[ref] = inverse
        inline = np.flatnonzero(self.length >= 0)
        if len(inline):
            decoded = _span_strings(data, self.start[inline], self.length[inline])
            codes[inline] = decoded.indices.to_numpy() + len(words)
            words += decoded.dictionary.to_pylist()
        return _Words(codes, words)


@dataclass(frozen=True, slots=True)
class _Words:
    """A string stat per event: codes into `words` (-1: none)."""

    codes: np.ndarray  # int32
    words: list[str]


def _small_unique(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True) of non-negative ints, without a sort
    where they are small (references to a plane's stat metadata: ids in the
    hundreds)."""
    largest = int(values.max())
    if largest >= 1 << 20:
        return np.unique(values, return_inverse=True)
    seen = np.zeros(largest + 1, dtype=bool)
    seen[values] = True
    unique = np.flatnonzero(seen)
    rank = np.cumsum(seen, dtype=np.int64) - 1
    return unique, rank[values]


def _stat_table(reader: _PlaneReader, events: np.ndarray, rest: np.ndarray) -> StatTable:
    """The stats of `events` (positions in the plane; `rest`: where each one's
    stats begin)."""
    event, start, length = scan_embedded(reader.buf, rest, reader.ends[events], 4)
    stats, message = scan_stats(reader.buf, start, start + length)
    named = None
    if reader.id_codes is not None:
        ids = stats.metadata_id
        known = (ids >= 0) & (ids < len(reader.id_codes))
        named = np.where(known, reader.id_codes[np.where(known, ids, 0)], 0)
    return StatTable(stats, event[message], len(events), named)


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def events_with_stat(reader: _PlaneReader, stat_ids: list[int]) -> np.ndarray:
    """Events that may carry one of `stat_ids`: those whose bytes hold a stat
    header (field 4, a one-byte length, then field 1 = the id). Rare stats such as
    step_num are found without decoding every event; callers decode these exactly."""
    found = []
    if not len(reader.starts):
        return np.zeros(0, np.int64)
    # The plane's events, and between its lines their headers (matches there are dropped).
    first, last = int(reader.starts.min()), int(reader.ends.max())
    for stat_id in stat_ids:
        header = b"\x22\x00\x08" + _encode_varint(stat_id)
        if compiled.available():
            at = compiled.find_stat_headers(reader.buf, first, last, header)
        else:
            # Where the pattern's last byte is (the id's: rarer than a tag), then the
            # rest; the length byte (second) may be anything.
            pattern, buf = np.frombuffer(header, np.uint8), reader.buf[first:last]
            at = np.flatnonzero(buf[len(pattern) - 1 :] == pattern[-1])
            for offset in (0, *range(2, len(pattern) - 1)):
                at = at[buf[at + offset] == pattern[offset]]
            at += first
        inside_at = at + 2  # where the id's field begins
        event = np.searchsorted(reader.ends, inside_at, side="right")
        inside = event < len(reader.ends)
        inside[inside] &= reader.starts[event[inside]] < inside_at[inside]
        found.append(event[inside])
    return np.unique(np.concatenate(found)) if found else np.zeros(0, np.int64)


def _concat_strings(parts: list[_Words], order: np.ndarray) -> pa.DictionaryArray:
    """The planes' strings of one stat as one column, its rows in `order`, its
    words each once."""
    index: dict[str, int] = {}
    codes = []
    for part in parts:
        first = len(index)
        remap = [index.setdefault(w, len(index)) for w in part.words]
        if remap == list(range(first, len(index))):  # (each word new here: the usual)
            codes.append(np.where(part.codes >= 0, part.codes + first, -1) if first else part.codes)
            continue
        table = np.array(remap or [0], np.int32)
        codes.append(np.where(part.codes >= 0, table[np.maximum(part.codes, 0)], -1))
    taken = _joined(codes, order)
    return pa.DictionaryArray.from_arrays(
        pa.array(taken, mask=taken < 0), pa.array(list(index), pa.string())
    )


def _joined(parts: list[np.ndarray], order: np.ndarray) -> np.ndarray:
    """The planes' values of one column as one array, in `order`."""
    return (parts[0] if len(parts) == 1 else np.concatenate(parts))[order]


def one_of(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """np.isin(values, wanted) for ints: through a table where `wanted` are small
    ids (a plane's metadata ids, in the hundreds), at a fifth of isin's cost."""
    if not len(wanted) or wanted.min() < 0 or wanted.max() >= 1 << 20:
        return np.isin(values, wanted)
    table = np.zeros(int(wanted.max()) + 2, dtype=bool)  # (the last: every id past it)
    table[wanted] = True
    return table[np.clip(values, -1, len(table) - 1)]


def _session_times(space: Any) -> tuple[int | None, int | None]:
    """The session's start and stop (ns since the epoch), where TSL wrote them."""
    times: dict[str, int] = {}
    for plane in space.planes:
        if plane.name != TASK_ENVIRONMENT:
            continue
        for stat in plane.stats:
            meta = plane.stat_metadata.get(stat.metadata_id)
            if meta is not None and meta.name in ("profile_start_time", "profile_stop_time"):
                times[meta.name] = int(stat.uint64_value or stat.int64_value)
    return times.get("profile_start_time") or None, times.get("profile_stop_time") or None


_PICOSECONDS_FIT_NS = (1 << 62) // 1000  # line times below this fit in int64 picoseconds


def read_memory_events(space: Any, data: bytes, workers: int = 1) -> MemoryEvents:
    """All memory events and step marks in an XSpace (`space`, parsed from
    `data`), sorted by time; their stats decoded on `workers` threads."""
    times, allocs, numerics, strings = [], [], [], []
    step_times: list[np.ndarray] = []
    step_numbers: list[np.ndarray] = []
    step_names: list[str] = []
    event_names: set[str] = set()
    located = first_events(data, space)
    wanted = []
    for index, plane in enumerate(space.planes):
        # Only a plane with events to read gets a reader (some microseconds and a
        # kilobyte each): the rest cost a look, though a profile held millions.
        names = {meta.name for meta in plane.event_metadata.values()}
        event_names |= names
        if not plane.lines or not (
            ALLOCATION in names
            or DEALLOCATION in names
            or any(meta.name == STEP_STAT for meta in plane.stat_metadata.values())
        ):
            continue
        reader = _PlaneReader(plane)
        if reader.wanted():  # (planes not found by first_events: read the slow way)
            wanted.append((reader, located[index] if index < len(located) else []))
    # Profiles normalize their lines' times to the session's start; one that did
    # not (epoch nanoseconds) is read from its earliest line, the same for all planes.
    earliest = min((line.timestamp_ns for r, _ in wanted for line in r.plane.lines), default=0)
    base_ns = earliest if earliest > _PICOSECONDS_FIT_NS else 0
    for reader, where in wanted:
        reader.load_events(base_ns, data, where)
        has_steps = STEP_STAT in reader.stat_ids
        memory_ids = reader.ids_of((ALLOCATION, DEALLOCATION))
        metadata_id = reader.metadata_ids()
        memory = np.flatnonzero(one_of(metadata_id, memory_ids))
        if len(memory):
            time_ps, numeric, string = reader.read_events(memory, workers)
            times.append(time_ps)
            allocs.append(one_of(metadata_id[memory], reader.ids_of((ALLOCATION,))))
            numerics.append(numeric)
            strings.append(string)
        if has_steps:
            candidates = events_with_stat(reader, reader.stat_ids[STEP_STAT])
            time_ps, rest = reader.headers(candidates)
            step = reader.numeric(_stat_table(reader, candidates, rest), STEP_STAT)
            step_times.append(time_ps[step.present])
            step_numbers.append(step.values[step.present])
            step_names.extend(
                reader.event_names.get(int(i), "") for i in metadata_id[candidates[step.present]]
            )
    if times:
        time_ps = np.concatenate(times)
        order = np.argsort(time_ps, kind="stable")
        events = MemoryEvents(
            hostnames=list(space.hostnames),
            plane_names=[p.name for p in space.planes],
            event_names=event_names,
            time_ps=time_ps[order],
            is_alloc=_joined(allocs, order),
            numeric={
                n: StatColumn(
                    _joined([c[n].values for c in numerics], order),
                    _joined([c[n].present for c in numerics], order),
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
    events.profile_start_ns, events.profile_stop_ns = _session_times(space)
    if step_times:
        events.step_time_ps = np.concatenate(step_times)
        events.step_number = np.concatenate(step_numbers)
        events.step_name = step_names
    return events
