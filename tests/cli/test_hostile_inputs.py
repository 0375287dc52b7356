"""What a hostile user found (issue 47, part A), each ending in a report or one
line and exit status 2, at a cost bounded by a rule that is tested at its bound:
stack rows nested past Python's parser, shapes and dtypes no array has, TPU
topologies no TPU has, XSpace profiles of a million empty planes, traces of
thousands of devices, program rows that decompress to gigabytes, and PyTorch
snapshots whose addresses a fixed hash puts in one slot."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest
from hostile_snapshots import FLOOD_BYTES, write_flooding_snapshot

from conftest import assert_one_line_error, run_tpumem
from hostile_traces import _header, _rows, _with_stack, packed_zeros, write, zeros_hlo_row
from tpumem.analysis.trace_figures import analyze
from tpumem.hlo import tiles
from tpumem.hlo.tiles import MAX_ELEMENTS, MAX_RANK, element_bits, parse_shape, tiled_bytes
from tpumem.tpu.topology import parse_topology
from tpumem.trace import arrow_arrays, hlo_rows
from tpumem.trace.model import Trace
from tpumem.trace.reader import load
from tpumem.xplane import memory_events
from xspace_builder import build_space

NOT_ESTIMATED = "TPU layout padding not estimated for"


def _report(path: Path, *options: str) -> dict:
    result = run_tpumem("report", str(path), "-f", "json", *options)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _with_shapes(path: Path, *shapes: tuple[str, str], header: dict | None = None) -> Path:
    """A trace whose first buffers have these (shape, dtype); the rest [16,16] float32."""
    rows = _rows()
    for row, (shape, dtype) in zip(rows, shapes, strict=False):
        row["shape"], row["dtype"] = shape, dtype
    return write(path, rows, header=header)


# Call stacks


def test_a_stack_nested_deeper_than_python_parses_is_an_unreadable_stack(tmp_path):
    path = write(tmp_path / "t.tpumem", _with_stack(0, "[" * 100_000 + "]" * 100_000))
    report = _report(path)
    assert any("left out 1 call stacks that were not readable" in w for w in report["warnings"])


# TPU layout padding


def test_a_dtype_of_no_width_is_not_estimated_in_any_command_of_a_run(tmp_path):
    """float0 (JAX's dtype of no bytes) and a width read as 0 divided by zero:
    every command on a run directory holding such a trace failed."""
    run = tmp_path / "run"
    run.mkdir()
    for rank, dtype in enumerate(("float0", "int00")):
        process = {"index": rank, "count": 2, "source": "RANK"}
        header = _header(host="h", pid=1000 + rank, run="r", process=process)
        _with_shapes(run / f"h-{rank}.tpumem", ("[3,5]", dtype), header=header)
    one = str(run / "h-0.tpumem")
    for args in (
        ["report", str(run)],
        ["report", one, "-f", "json"],
        ["check", str(run), "--max-peak", "1GiB"],
        ["diff", one, str(run / "h-1.tpumem")],
        ["compare", str(run), one],
        ["export", "tensorboard", str(run), "--logdir", str(tmp_path / "tb")],
    ):
        result = run_tpumem(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert any(NOT_ESTIMATED in note for note in _report(Path(one))["fit"]["notes"])


def test_dimensions_of_thousands_of_digits_are_not_estimated(tmp_path):
    """The product once overflowed the fit advice's float division."""
    path = _with_shapes(tmp_path / "t.tpumem", ("[" + "9" * 4000 + ",7]", "float32"))
    report = _report(path)
    (note,) = [n for n in report["fit"]["notes"] if NOT_ESTIMATED in n]
    assert "1.0 KiB live at the peak" in note  # the first buffer's bytes
    assert report["devices"][0]["padding"]["uncounted_bytes"] == 1024


def test_a_shape_of_more_dimensions_than_any_framework_makes_is_not_estimated(tmp_path):
    """At the bound (254 dimensions, TensorFlow's most) the estimate is made; one
    past it, the report says it was not."""
    assert MAX_RANK == 254
    at_bound = "[" + ",".join(["1"] * (MAX_RANK - 2) + ["16", "16"]) + "]"
    past = "[" + ",".join(["1"] * (MAX_RANK - 1) + ["16", "16"]) + "]"
    report = _report(_with_shapes(tmp_path / "at.tpumem", (at_bound, "float32")))
    assert report["devices"][0]["padding"]["uncounted_bytes"] == 0
    assert not any(NOT_ESTIMATED in n for n in report["fit"]["notes"])
    report = _report(_with_shapes(tmp_path / "past.tpumem", (past, "float32")))
    assert report["devices"][0]["padding"]["uncounted_bytes"] == 1024
    assert any(NOT_ESTIMATED in n for n in report["fit"]["notes"])


def test_the_bounds_of_a_shape_and_a_dtype():
    elements = MAX_ELEMENTS  # 2^50: 2^25 x 2^25
    assert parse_shape(f"[{1 << 25},{1 << 25}]") == (1 << 25, 1 << 25)
    assert parse_shape(f"[{1 << 25},{(1 << 25) + 1}]") is None
    assert parse_shape(f"[{elements}]") == (elements,)
    assert parse_shape(f"[{elements + 1}]") is None
    assert parse_shape("[0," + "9" * 30 + "]") is None  # an int64 XLA could not hold
    assert parse_shape("[\uff12,3]") is None  # digits of another script
    assert [element_bits(d) for d in ("complex128", "int1", "float0", "int00")] == [
        128,
        1,
        None,
        None,
    ]
    assert element_bits("float129") is None and element_bits("x" + "9" * 5000) is None


def test_the_best_layout_is_found_without_trying_every_pair(monkeypatch):
    """XLA:TPU may tile any two dimensions; the best pair is the one that pads
    least. It is found from each dimension on its own (a few layouts sized),
    and is the one trying every pair finds."""
    pick = random.Random(47)
    sizes = (1, 2, 3, 5, 8, 9, 16, 17, 100, 127, 128, 129, 1000)
    for _ in range(3000):
        dims = tuple(pick.choice(sizes) for _ in range(pick.randint(2, 5)))
        bits = pick.choice((1, 4, 8, 16, 32, 64))
        itemsize = max(1, bits // 8)
        every_pair = min(
            tiles._tiled(dims, minor, second, bits, itemsize)
            for minor, second in itertools.permutations(range(len(dims)), 2)
        )
        assert tiled_bytes(dims, bits).best == every_pair, (dims, bits)
    sized = []
    original = tiles._tiled
    monkeypatch.setattr(tiles, "_tiled", lambda *a: sized.append(1) or original(*a))
    tiled_bytes(tuple(range(1, MAX_RANK + 1)), 32)
    assert len(sized) <= 3  # every pair: 254 x 253


# TPU topologies


@pytest.mark.parametrize(
    "name, words",
    [
        ("v5p:64x64x64", "no v5p slice is that large (the largest: 8,960 chips)"),
        ("v5p:3x29x103", "8,960 chips"),  # 8,961 chips
        ("v4:16x16x17", "4,096 chips"),
        ("v5e:16x17", "16x16, 256 chips"),
        ("v6e:1x32", "16x16, 256 chips"),
        ("v5e:\uff12x\uff12", "not a TPU topology"),  # fullwidth digits
        ("v5e:99999999999999999999x1", "not a TPU topology"),
    ],
)
def test_a_topology_no_tpu_has_is_one_line(tmp_path, name, words):
    trace = write(tmp_path / "t.tpumem")
    assert_one_line_error(run_tpumem("report", str(trace), "--tpu", name), "--tpu", words)


def test_the_largest_slices_are_topologies():
    largest = ("v4:16x16x16", "v5e:16x16", "v5p:16x20x28", "v6e:16x16", "v5p:1x1x8960")
    assert [parse_topology(name).chips for name in largest] == [4096, 256, 8960, 256, 8960]
    assert parse_topology("v5e:02x2").name == "v5e:2x2"  # as libtpu reads it


# XSpace profiles


def test_empty_planes_cost_a_look_each(tmp_path, monkeypatch):
    """A million empty planes in 2 MB took 91 s and 1.8 GB: every plane had a
    reader built and kept. Now only a plane with events to read gets one."""
    memory = {
        "name": "MemoryAllocation",
        "offset_ps": 1,
        "stats": {"addr": 1, "bytes_allocated": 5},
    }
    data = build_space([memory]) + b"\x0a\x00" * 20_000  # XSpace.planes: empty XPlanes
    built = []
    original = memory_events._PlaneReader.__init__
    monkeypatch.setattr(
        memory_events._PlaneReader,
        "__init__",
        lambda self, plane: built.append(plane.name) or original(self, plane),
    )
    events = memory_events.read_memory_events(memory_events.parse_space(data), data)
    assert len(events) == 1 and built == ["/host:CPU"]
    assert len(events.plane_names) == 20_001
    profile = tmp_path / "host.xplane.pb"
    profile.write_bytes(data)
    result = run_tpumem("import", str(profile), "-o", str(tmp_path / "out.tpumem"))
    assert result.returncode == 0, result.stderr
    assert _report(tmp_path / "out.tpumem")["devices"]


# Traces of many devices


class _CountedName(str):
    """A device name that counts how often it is compared."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        _CountedName.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def _count_costs(monkeypatch) -> list[int]:
    """From here on, reads of whole columns are counted (in the list returned)
    and the device names a trace gives are _CountedNames."""
    reads = [0]
    for name in ("dictionary_codes", "filled", "valid", "equal_to"):
        whole = getattr(arrow_arrays, name)

        def counted(*args, _whole=whole, **kwargs):
            reads[0] += 1
            return _whole(*args, **kwargs)

        monkeypatch.setattr(arrow_arrays, name, counted)
    codes = Trace.codes

    def counted_names(self: Trace, name: str):
        found, values = codes(self, name)
        if name != "device":
            return found, values
        return found, self.derived("counted names", lambda: [_CountedName(v) for v in values])

    monkeypatch.setattr(Trace, "codes", counted_names)
    return reads


def _analysis_costs(tmp_path: Path, devices: int, reads: list[int]) -> tuple[int, int]:
    """(reads of a whole column, comparisons of device names) in analysing a trace
    of `devices` devices, one buffer each, each of a shape and op of its own."""
    rows = [
        {
            "kind": "alloc",
            "time_ns": i,
            "device": f"GPU:{i}",
            "buffer_id": i,
            "bytes": 1024,
            "op": f"op{i}",
            "shape": f"[16,{i + 1}]",
            "dtype": "float32",
        }
        for i in range(devices)
    ]
    trace = load(write(tmp_path / f"d{devices}.tpumem", rows))
    reads[0] = _CountedName.compared = 0
    analysis = analyze(trace)
    assert len(analysis.devices) == devices
    return reads[0], _CountedName.compared


def test_the_analysis_of_many_devices_reads_each_column_a_bounded_number_of_times(
    tmp_path, monkeypatch
):
    """Each device's analysis once looked its name up in the list of names and
    read the op, shape and dtype dictionaries whole (10k devices 13 s, 100k
    devices 252 s and 4.2 GB). Now the reads of whole columns do not grow with
    the devices, and a device's name is compared a bounded number of times."""
    reads = _count_costs(monkeypatch)
    few_reads, few_compared = _analysis_costs(tmp_path, 300, reads)
    many_reads, many_compared = _analysis_costs(tmp_path, 1200, reads)
    assert many_reads == few_reads
    assert few_compared <= 2 * 300 and many_compared <= 2 * 1200


# Program rows


def test_a_program_row_past_the_bound_is_left_out_with_one_warning(tmp_path):
    """A 1.4 MB row of a gigabyte of zeros took 2.2 GB to report."""
    hlo = zeros_hlo_row(hlo_rows.MAX_PROTO_BYTES + 1)
    assert len(hlo["text"]) < 1 << 20
    path = write(tmp_path / "t.tpumem", [*_rows(), hlo, hlo])
    report = _report(path)
    assert [w for w in report["warnings"] if "decompress past" in w] == [
        "left out 2 compiled programs (hlo rows) that decompress past 256 MiB, more than "
        "any program a run compiles"
    ]
    assert report["programs"] == []


def test_a_packed_proto_is_read_up_to_the_bound(monkeypatch):
    monkeypatch.setattr(hlo_rows, "MAX_PROTO_BYTES", 1 << 20)
    at_bound = hlo_rows.unpack(packed_zeros(1 << 20))
    assert at_bound is not None and len(at_bound) == 1 << 20
    assert hlo_rows.unpack(packed_zeros((1 << 20) + 1)) is None
    assert hlo_rows.unpack(hlo_rows.pack(b"proto")[:-8]) is None  # a stream cut short


def test_only_the_profiles_own_program_files_are_read(tmp_path):
    """Beside a profile, files named like XProf's programs that are not its files:
    a link to /etc/passwd, a link to /dev/zero, a FIFO. None is read (before: the
    first went into the trace verbatim, the second read without bound, the third
    hung); the profile imports with the programs it has."""
    import os

    profile = tmp_path / "host.xplane.pb"
    profile.write_bytes(
        (Path(__file__).parent.parent / "data" / "xplane" / "tf_cpu.xplane.pb").read_bytes()
    )
    (tmp_path / "x(7).hlo_proto.pb").symlink_to("/etc/passwd")
    (tmp_path / "z(8).hlo_proto.pb").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "f(9).hlo_proto.pb")
    trace = tmp_path / "t.tpumem"
    result = run_tpumem("import", str(profile), "-o", str(trace))
    assert result.returncode == 0, result.stderr
    read = [row for row in hlo_rows.hlo_rows(load(trace)) if row is not None]
    assert all(b"root:" not in row.data for row in read)
    assert {row.program_id for row in read}.isdisjoint({7, 8, 9})


def test_a_directory_is_searched_for_profiles_in_xprofs_layouts_only(tmp_path):
    """`report /` walked the whole filesystem for profiles and called what it found
    one run. Profiles are looked for where XProf and TensorBoard write them: a
    logdir's plugins/profile/<run>/, also one or two directories down."""
    source = (Path(__file__).parent.parent / "data" / "xplane" / "tf_cpu.xplane.pb").read_bytes()
    deep = tmp_path / "a" / "b" / "c" / "d" / "run" / "host.xplane.pb"
    deep.parent.mkdir(parents=True)
    deep.write_bytes(source)
    assert_one_line_error(run_tpumem("report", str(tmp_path)), "no traces")
    assert_one_line_error(run_tpumem("import", str(tmp_path)), "no *.xplane.pb profiles in it")
    logdir = tmp_path / "logs" / "train" / "plugins" / "profile" / "2026_11_27"
    logdir.mkdir(parents=True)
    (logdir / "host.xplane.pb").write_bytes(source)
    result = run_tpumem("report", str(tmp_path / "logs"), "-f", "json")
    assert result.returncode == 0, result.stderr
    assert_one_line_error(run_tpumem("report", "/"), "no traces")


def test_when_no_live_shape_is_an_arrays_the_padding_row_says_so(tmp_path):
    """Every buffer live at the peak of dtype float0: the padding row says why it
    has no figure, not that no shapes were recorded."""
    rows = [{**row, "dtype": "float0"} if row["kind"] == "alloc" else row for row in _rows()]
    result = run_tpumem(
        "report", str(write(tmp_path / "t.tpumem", rows)), "--full", "--width", "200"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    (line,) = [line for line in lines if line.startswith("TPU layout padding  ")]  # the row
    assert "are no array's" in line and "no shapes and dtypes recorded" not in line


# PyTorch memory snapshots


@pytest.mark.parametrize(
    ("allocations", "unpickler"),
    [(160_000, False), (640_000, False), (160_000, True)],
    ids=["walker-160k", "walker-640k", "unpickler-160k"],
)
def test_a_snapshot_whose_addresses_share_a_hash_slot_imports_whole(
    tmp_path, monkeypatch, allocations, unpickler
):
    """Every address a multiple of 2^32: the walker's table of live allocations,
    hashed by the address's low bits, put them all in one slot, and 160,000 took a
    minute to import (640,000 would take a quarter of an hour, past run_tpumem's
    bound); keyed by a random key for each import, they spread. The unpickler's
    path (Python's dict) reads the same. benchmarks/snapshot_flood.py measures it."""
    if unpickler:
        monkeypatch.setenv("TPUMEM_SNAPSHOT_UNPICKLER", "1")
    source = write_flooding_snapshot(tmp_path / "flood.pickle", allocations)
    imported = run_tpumem("import", str(source), "-o", str(tmp_path / "flood.tpumem"))
    assert imported.returncode == 0, imported.stderr
    assert f"{2 * allocations:,} trace entries ({allocations:,} allocations)" in imported.stdout
    (device,) = _report(tmp_path / "flood.tpumem")["devices"]
    assert device["peak"]["bytes"] == allocations * FLOOD_BYTES  # every one live at once
