"""The column-wise XSpace decoder against protobuf's own parser."""

from __future__ import annotations

import numpy as np
import pytest

from tpumem.xplane.memory_events import parse_space, read_memory_events
from tpumem.xplane.schema import messages
from tpumem.xplane.wire import (
    WireError,
    read_varints,
    scan,
    scan_embedded,
    scan_stats,
    sized_varints,
)
from xspace_builder import build_space


def memory_event(i: int, alloc: bool) -> dict:
    return {
        "name": "MemoryAllocation" if alloc else "MemoryDeallocation",
        "offset_ps": 1_000_000 * i,
        "stats": {
            "allocator_name": ("ref", "GPU_0_bfc"),
            "bytes_allocated": 256 * (i + 1),
            "fragmentation": 0.125 * (i % 4),
            "addr": 2**47 + 256 * i,
            "id": -(2**62) - i,  # int64 that a float would round
            "tf_op": f"op{i % 3}" if i % 2 else ("ref", "refop"),
            "shape": "[8,32]",
            "data_type": 14,
        },
    }


def test_decoded_columns_equal_protobufs_own_parse():
    events = [memory_event(i, alloc=i % 3 != 2) for i in range(50)]
    events.insert(10, {"name": "SomethingElse", "offset_ps": 5, "stats": {"x": 1}})
    data = build_space(events)
    decoded = read_memory_events(parse_space(data), data)
    full = messages("full")["XSpace"]()
    full.ParseFromString(data)
    plane = full.planes[0]
    names = {k: v.name for k, v in plane.event_metadata.items()}
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
    expected = [e for e in plane.lines[0].events if names[e.metadata_id].startswith("Memory")]
    assert len(decoded) == len(expected) == 50
    for i, event in enumerate(expected):
        stats = {stat_names[s.metadata_id]: s for s in event.stats}
        assert decoded.time_ps[i] == 1000 * 1000 + event.offset_ps
        assert decoded.is_alloc[i] == (names[event.metadata_id] == "MemoryAllocation")
        assert decoded.numeric["id"].values[i] == stats["id"].int64_value
        assert decoded.numeric["addr"].values[i] == stats["addr"].uint64_value
        assert decoded.numeric["fragmentation"].values[i] == stats["fragmentation"].double_value
        op = stats["tf_op"]
        want = op.str_value if op.WhichOneof("value") == "str_value" else stat_names[op.ref_value]
        assert decoded.strings["tf_op"][i].as_py() == want
        assert decoded.strings["allocator_name"][i].as_py() == "GPU_0_bfc"


def _length_delimited(number: int, payload: bytes) -> bytes:
    size, header = len(payload), bytearray([number << 3 | 2])
    while size >= 0x80:
        header.append(size & 0x7F | 0x80)
        size >>= 7
    return bytes(header) + bytes([size]) + payload


def _with_a_field_among_the_events(data: bytes, at: int) -> bytes:
    """The same space, its plane's line written with its display name between
    events `at - 1` and `at` (valid protobuf, which no profiler writes)."""
    lazy = messages("lazy")
    space = parse_space(data)
    plane = space.planes[-1]
    line = plane.lines[0]
    head = lazy["XLine"]()
    head.CopyFrom(line)
    del head.events[at:]
    tail = lazy["XLine"](events=line.events[at:])
    line_bytes = b"".join(
        (
            head.SerializeToString(),
            lazy["XLine"](display_name="between").SerializeToString(),
            tail.SerializeToString(),
        )
    )
    rest = lazy["XPlane"]()
    rest.CopyFrom(plane)
    del rest.lines[:]
    plane_bytes = _length_delimited(3, line_bytes) + rest.SerializeToString()
    others = lazy["XSpace"]()
    others.CopyFrom(space)
    del others.planes[:]
    return _length_delimited(1, plane_bytes) + others.SerializeToString()


def test_events_are_read_in_place_and_the_same_where_they_cannot_be():
    """A line's events are found in the profile's own bytes from their lengths;
    a line with another field among its events is read the slow way, to the same
    columns, and never misread."""
    from tpumem.xplane import compiled
    from tpumem.xplane.event_spans import first_events, place_events

    events = [memory_event(i, alloc=i % 3 != 2) for i in range(60)]
    events[4]["stats"]["tf_op"] = "y" * 200  # an event longer than 127 bytes
    data = build_space(events)
    buf = np.frombuffer(data, np.uint8)
    lengths = np.array([len(e) for e in parse_space(data).planes[0].lines[0].events])
    where = first_events(data, parse_space(data))[0][0]
    starts, ends = place_events(buf, where, lengths)
    full = messages("full")["XEvent"]
    for i, event in enumerate(parse_space(data).planes[0].lines[0].events):
        assert data[starts[i] : ends[i]] == event
        assert full.FromString(data[starts[i] : ends[i]]).offset_ps == 1_000_000 * i
    assert place_events(buf, (where[0] + 1, where[1]), lengths) is None
    # The C walk finds the same events with no lengths given, and their metadata ids.
    walked = compiled.line_events(buf, *where, most=60)
    assert walked.starts.tolist() == starts.tolist() and walked.ends.tolist() == ends.tolist()
    events_read = parse_space(data).planes[0].lines[0].events
    assert walked.ids.tolist() == [full.FromString(e).metadata_id for e in events_read]
    assert compiled.line_events(buf, where[0], where[1] - 1, most=60) is None  # the last one cut
    assert compiled.line_events(buf, *where, most=59) is None  # more than upb counted

    odd = _with_a_field_among_the_events(data, at=30)
    assert parse_space(odd).planes[0].lines[0].display_name == "between"
    where = first_events(odd, parse_space(odd))[0][0]
    assert place_events(np.frombuffer(odd, np.uint8), where, lengths) is None
    # (the walk stops at the field: 30 events where upb counts 60, so the slow way)
    assert len(compiled.line_events(np.frombuffer(odd, np.uint8), *where, most=60).starts) == 30
    assert _columns(odd) == _columns(data)
    assert len(_columns(odd)[0]) == 60


@pytest.mark.parametrize("names_before", [0, 200])
@pytest.mark.parametrize("decoder", ["C kernels", "numpy"])
def test_step_marks_are_found_among_the_events(monkeypatch, names_before, decoder):
    """Events carrying TensorFlow's step_num stat mark steps: found by their stat
    header in the plane's bytes, each read exactly, those without it left out;
    also where step_num's id takes two bytes (200 stat names before it)."""
    if decoder == "numpy":
        _numpy_only(monkeypatch)
    events = [memory_event(i, alloc=True) for i in range(20)]
    if names_before:
        events[0]["stats"].update({f"extra{k}": k for k in range(names_before)})
    for step in range(3):
        events.insert(
            5 * step + 1, {"name": "train", "offset_ps": 7 + step, "stats": {"step_num": step}}
        )
    events.append({"name": "train", "offset_ps": 99, "stats": {"other": 1}})  # not a step
    data = build_space(events)
    decoded = read_memory_events(parse_space(data), data)
    assert decoded.step_number.tolist() == [0, 1, 2]
    assert decoded.step_time_ps.tolist() == [1000 * 1000 + 7 + step for step in range(3)]
    assert decoded.step_name == ["train"] * 3
    assert len(decoded) == 20


def test_varints_of_every_length():
    values = [0, 1, 127, 128, 300, 2**32, 2**63 - 1, 2**64 - 1]
    encoded = bytearray()
    positions = []
    for v in values:
        positions.append(len(encoded))
        while True:
            byte = v & 0x7F
            v >>= 7
            encoded.append(byte | (0x80 if v else 0))
            if not v:
                break
    decoded, _ = read_varints(np.frombuffer(bytes(encoded), np.uint8), np.array(positions))
    assert decoded.tolist() == values


def test_a_field_past_the_end_is_an_error():
    buf = np.frombuffer(bytes([0x22, 0x10, 0x01]), np.uint8)  # says 16 bytes follow, 1 does
    with pytest.raises(WireError):
        scan(buf, np.array([0]), np.array([3]))


def test_irregular_events_and_stats_take_the_generic_path():
    """A stat with metadata_id 0 (left out on the wire), a stat carrying an unknown
    extra field, and an event with a field after its stats (num_occurrences)."""
    m = messages("full")
    event = m["XEvent"](metadata_id=1, num_occurrences=3)
    event.stats.add(metadata_id=0, int64_value=-5)
    event.stats.add(metadata_id=2, double_value=0.5)
    odd = m["XStat"](metadata_id=3, uint64_value=9).SerializeToString() + bytes([0x40, 0x01])
    data = event.SerializeToString()
    data += bytes([0x22, len(odd)]) + odd  # a third stat, appended after field 5
    buf = np.frombuffer(data, np.uint8)
    message, start, length = scan_embedded(buf, np.array([2]), np.array([len(data)]), 4)
    stats, owner = scan_stats(buf, start, start + length)
    assert owner.tolist() == [0, 1, 2]
    assert stats.metadata_id.tolist() == [0, 2, 3]
    assert stats.number.tolist() == [4, 2, 3]
    assert stats.value[0].view(np.int64) == -5
    assert stats.value[1:2].view(np.float64)[0] == 0.5
    assert stats.value[2] == 9
    assert message.tolist() == [0, 0, 0]


def _general_only(monkeypatch) -> None:
    """Every stat through the general decoder: no table from stat ids to codes."""
    from tpumem.xplane import memory_events

    def without_codes(self, plane):  # type: ignore[no-untyped-def]
        original(self, plane)
        self.id_codes = None

    original = memory_events._PlaneReader.__init__
    monkeypatch.setattr(memory_events._PlaneReader, "__init__", without_codes)


def _numpy_only(monkeypatch) -> None:
    """The numpy decoder, as an install without a C compiler reads."""
    from tpumem.xplane import compiled

    monkeypatch.setattr(compiled, "_library", lambda: None)


def _in_every_decoder(monkeypatch, data: bytes, workers: int = 1) -> tuple:
    """The columns the C kernels read, checked to be those of the numpy decoder
    and of the general one (every stat read field by field)."""
    from tpumem.xplane import compiled

    assert compiled.available()
    in_c = _columns(data, workers)
    with monkeypatch.context() as patched:
        _numpy_only(patched)
        assert _columns(data, workers) == in_c
        _general_only(patched)
        assert _columns(data, workers) == in_c
    return in_c


def _columns(data: bytes, workers: int = 1) -> tuple:
    events = read_memory_events(parse_space(data), data, workers)
    return (
        events.time_ps.tolist(),
        events.is_alloc.tolist(),
        {n: (c.values.tolist(), c.present.tolist()) for n, c in events.numeric.items()},
        {n: c.to_pylist() for n, c in events.strings.items()},
    )


def test_regular_and_general_decoders_agree(monkeypatch):
    """Events of the usual shape and irregular ones mixed in one chunk: a string
    too long for a one-byte stat length, a stat id past 127, a bytes value."""
    events = [memory_event(i, alloc=i % 3 != 2) for i in range(40)]
    events[5]["stats"]["tf_op"] = "x" * 300
    events[7]["stats"].update({f"extra{k}": k for k in range(140)})
    events[9]["stats"]["shape"] = ("ref", "[1,2]")
    data = build_space(events)
    regular = _in_every_decoder(monkeypatch, data)
    assert regular[3]["tf_op"][5] == "x" * 300
    assert regular[2]["id"][0][7] == memory_event(7, True)["stats"]["id"]


def test_values_of_every_size_decode_alike_in_both_decoders(monkeypatch):
    """The regular decoder takes a varint's size from its stat's length: values of
    1 to 10 bytes (ten: a negative int64), as uint64 and as int64, a double and an
    empty string read as the general decoder reads them."""
    sizes = [0, 1, 127, 128, 2**14, 2**21, 2**28, 2**35, 2**42, 2**49, 2**56, 2**63 - 1]
    events = [memory_event(i, alloc=True) for i in range(len(sizes))]
    for event, value in zip(events, sizes, strict=True):
        event["stats"].update(addr=value, bytes_allocated=-value - 1, fragmentation=-0.0)
    events[3]["stats"]["shape"] = ""
    for signed in (False, True):
        data = build_space(events, signed=signed)
        regular = _in_every_decoder(monkeypatch, data)
        assert regular[2]["addr"][0] == sizes
        assert regular[2]["bytes_allocated"][0] == [-v - 1 for v in sizes]
        assert regular[3]["shape"][3] == ""


def test_sized_varints_read_a_varint_only_at_its_size():
    values = [1, 300, 2**40, 2**56 - 1]
    words, sizes = [], []
    for value in values:
        encoded = bytearray()
        while True:
            byte, value = value & 0x7F, value >> 7
            encoded.append(byte | (0x80 if value else 0))
            if not value:
                break
        sizes.append(len(encoded))
        words.append(int.from_bytes(bytes(encoded).ljust(8, b"\xff"), "little"))
    words_array = np.array(words, dtype=np.uint64)
    decoded, valid = sized_varints(words_array.copy(), np.array(sizes, dtype=np.uint8))
    assert decoded.tolist() == values and valid.all()
    # One byte short or long of the varint, or a size outside 1-8: not a varint.
    for wrong in (np.array(sizes) - 1, np.array(sizes) + 1, np.full(4, 9), np.zeros(4, int)):
        _, valid = sized_varints(words_array.copy(), wrong.astype(np.uint8))
        assert not valid.any()


def test_regular_and_general_decoders_agree_on_a_real_profile(monkeypatch):
    from pathlib import Path

    data = (Path(__file__).parent.parent / "data" / "xplane" / "tf_cpu.xplane.pb").read_bytes()
    regular = _in_every_decoder(monkeypatch, data)
    assert len(regular[0]) > 100


def test_chunks_decoded_on_threads_are_the_same_columns(monkeypatch):
    """A real profile's events in chunks of 7 (irregular ones among them), decoded
    on one thread and on four that take chunks as they finish: column for column
    the same; an error in any chunk is raised to the caller."""
    from pathlib import Path

    from tpumem.xplane import memory_events
    from tpumem.xplane.wire import WireError

    data = (Path(__file__).parent.parent / "data" / "xplane" / "tf_cpu.xplane.pb").read_bytes()
    monkeypatch.setattr(memory_events, "CHUNK_EVENTS", 7)
    one = _columns(data)
    assert len(one[0]) > 100
    assert _in_every_decoder(monkeypatch, data, workers=4) == one

    def every_chunk_fails(*args):  # type: ignore[no-untyped-def]
        raise WireError("a chunk that is not protobuf")

    monkeypatch.setattr(memory_events, "decode_regular", every_chunk_fails)
    monkeypatch.setattr(memory_events.compiled, "decode_events", every_chunk_fails)
    with pytest.raises(WireError, match="not protobuf"):
        read_memory_events(parse_space(data), data, workers=4)
    _numpy_only(monkeypatch)
    with pytest.raises(WireError, match="not protobuf"):
        read_memory_events(parse_space(data), data, workers=4)


def test_the_install_built_the_c_kernels():
    """`make test` installs with a C compiler, so the kernels must be there: else
    every profile would be read by the numpy decoder, at about three times the CPU
    (the same columns: the tests above hold the decoders to each other)."""
    from tpumem.xplane import compiled

    assert compiled.available(), "tpumem/xplane/event_kernels.c was not built by the install"


def test_the_c_kernels_take_any_bytes():
    """Random bytes and every cut of real events: the kernels never read outside
    the spans they are given (a crash here would take the test process down), and
    what they cannot read is marked, its rows left empty."""
    from pathlib import Path

    from tpumem.xplane import compiled

    rng = np.random.default_rng(7)
    ref, start, length = (np.zeros(64, np.int64) for _ in range(3))
    values, present = np.zeros(64, np.int64), np.zeros(64, bool)
    columns = (compiled.Column * 3)()
    columns[1] = compiled.numeric_column(values, present)
    columns[2] = compiled.string_column(ref, start, length)
    id_codes = np.array([0, 1, 2, 1], dtype=np.int8)
    data = (Path(__file__).parent.parent / "data" / "xplane" / "tf_cpu.xplane.pb").read_bytes()
    real = np.frombuffer(data, np.uint8)
    pieces = [rng.integers(0, 256, rng.integers(1, 300), dtype=np.uint8) for _ in range(300)]
    pieces += [real[at : at + cut] for at in range(1000, 1100, 7) for cut in range(0, 200, 9)]
    marked = 0
    for piece in pieces:
        buf = np.ascontiguousarray(piece)
        ref[:], start[:], length[:], present[:] = -1, 0, -1, False
        walked = compiled.line_events(buf, 0, len(buf), most=len(buf))
        assert walked is None or (walked.ends <= len(buf)).all()
        cuts = np.sort(rng.integers(0, len(buf) + 1, 2 * 64)).reshape(64, 2)
        _, irregular = compiled.decode_events(buf, cuts[:, 0], cuts[:, 1], id_codes, columns, 0)
        assert not present[irregular].any() and (length[irregular] == -1).all()
        assert (start + np.maximum(length, 0) <= len(buf)).all()
        marked += int(irregular.sum())
    assert marked > 0


def test_the_shortcuts_give_what_numpys_own_functions_give():
    """The buffers' pairing in C (the numpy grouping's ids), the id lookup
    (isin's) and the planes' strings joined into one column, on values that
    repeat, ids outside the table and words that two planes share."""
    import pyarrow as pa

    from tpumem.xplane import compiled
    from tpumem.xplane.memory_events import _concat_strings, _Words, one_of
    from tpumem.xplane.trace_columns import _pair_in_numpy, pair_buffers

    rng = np.random.default_rng(7)
    # A null allocator (NaN in the codes) pairs with nothing, as under lexsort.
    codes = np.array([0.0, np.nan, np.nan, 0.0])
    address = np.array([16, 16, 16, 16])
    is_alloc = np.array([True, True, False, False])
    assert pair_buffers(codes, address, is_alloc).tolist() == [0, 1, -1, 0]
    assert _pair_in_numpy(codes, address, is_alloc).tolist() == [0, 1, -1, 0]
    # The C kernel's one pass (a table of places) pairs as the grouped order does:
    # frees twice over, allocations never freed, places that share low bits.
    for count, allocators, places in ((0, 1, 1), (1, 1, 1), (3000, 1, 40), (5000, 3, 400)):
        codes = rng.integers(0, allocators, count).astype(float)
        codes[rng.random(count) < 0.05] = np.nan
        address = rng.integers(0, places, count) << 40
        is_alloc = rng.random(count) < 0.5
        expected = _pair_in_numpy(codes, address, is_alloc)
        known = np.where(np.isnan(codes), -1, codes).astype(np.int64)
        assert compiled.pair_buffers(known, address, is_alloc).tolist() == expected.tolist()
    values = rng.integers(-5, 3000, 5000)
    for wanted in ([], [0], [1, 13], [2999, 3000, 4000], [-1, 7], [1 << 40]):
        assert one_of(values, np.array(wanted, dtype=np.int64)).tolist() == (
            np.isin(values, wanted).tolist()
        )
    parts = [
        _Words(np.array([0, -1, 1], np.int32), ["a", "b"]),
        _Words(np.array([1, 0, -1], np.int32), ["c", "a"]),
        _Words(np.array([-1], np.int32), []),
    ]
    joined = _concat_strings(parts, np.array([6, 5, 4, 3, 2, 1, 0]))
    assert joined.to_pylist() == [None, None, "c", "a", "b", None, "a"]
    assert joined.dictionary.to_pylist() == ["a", "b", "c"]
    assert joined.type == pa.dictionary(pa.int32(), pa.string())
