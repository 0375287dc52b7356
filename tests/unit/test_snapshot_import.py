"""PyTorch memory snapshots into traces (`tpumem import SNAPSHOT.pickle`).

The snapshots in tests/data/torch_cuda were recorded by PyTorch itself on an
NVIDIA H200 (tests/tools/record_torch_snapshots.py), each beside what PyTorch's
own counters said (PART.json): the trace's figures must equal those counters.
Others are built here from the format, for what a recording cannot show.
"""

from __future__ import annotations

import json
import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_valid_json, run_tpumem
from tpumem.analysis import analyze
from tpumem.analysis.oom import LIMIT
from tpumem.errors import TpumemError
from tpumem.outputs import create_trace
from tpumem.report.change_rows import change_lines
from tpumem.report.json_report import report_dict
from tpumem.snapshots import walker
from tpumem.snapshots.importing import import_snapshot
from tpumem.snapshots.walker import ACTION, SnapshotWalk
from tpumem.trace.cuda_blocks import block_sizes, divisions_by_interval
from tpumem.trace.reader import load

DATA = Path(__file__).parent.parent / "data" / "torch_cuda"
PARTS = ("mlp", "oom", "overflow", "expandable", "state", "bare", "gpt2")
# Recorded from before the first allocation: the peak is the whole run's.
FROM_THE_START = ("mlp", "oom", "expandable", "gpt2")


def _counters(part: str) -> dict:
    return json.loads((DATA / f"{part}.json").read_text())


def _imported(source: Path, tmp_path: Path):
    target = tmp_path / f"{source.stem}.tpumem"
    written, converted = import_snapshot(source, lambda: (target, create_trace(target, (), False)))
    return analyze(load(written)), converted


def _rows(path: Path, unpickle: bool, monkeypatch) -> tuple[dict, list, dict, tuple]:
    if unpickle:
        monkeypatch.setattr(walker, "_library", lambda: None)
    with SnapshotWalk(path) as walk:
        pieces = list(walk.rows())
        columns = {
            name: np.concatenate([getattr(p, name) for p in pieces]) if pieces else np.zeros(0)
            for name in ("device", "action", "category", "addr", "size", "stream", "time_us")
        }
        buffers = np.concatenate([p.buffer for p in pieces]) if pieces else np.zeros(0)
        frames = [walk.frames(int(f)) for p in pieces for f in p.frames] if pieces else []
        columns["buffer"] = buffers
        return columns, frames, walk.rest, tuple(a.tolist() for a in walk.live())


@pytest.mark.parametrize("part", PARTS)
def test_the_walker_reads_what_the_unpickler_reads(part, monkeypatch):
    """The C walker (streaming) and the fallback (pickle.load of plain data)
    give the same rows, frames, state and live allocations."""
    assert walker.walker_built()
    path = DATA / f"{part}.pickle"
    streamed = _rows(path, False, monkeypatch)
    unpickled = _rows(path, True, monkeypatch)
    for name in streamed[0]:
        assert np.array_equal(streamed[0][name], unpickled[0][name]), name
    assert streamed[1:] == unpickled[1:]
    snapshot = pickle.loads(path.read_bytes())
    assert len(streamed[0]["action"]) == sum(len(t) for t in snapshot["device_traces"])
    assert streamed[2]["segments"] == snapshot["segments"]


@pytest.mark.parametrize("part", PARTS)
def test_the_peak_and_pool_are_pytorchs_own(part, tmp_path):
    analysis, converted = _imported(DATA / f"{part}.pickle", tmp_path)
    counters = _counters(part)
    (gpu,) = analysis.devices
    assert gpu.device == "GPU:0" and gpu.fidelity == "allocator"
    assert analysis.framework == "pytorch" and analysis.backend == "gpu"
    # The segments at the end, less the trace's segment entries: the pool.
    assert gpu.preallocation.pool_peak_bytes == counters["max_memory_reserved"]
    if part in FROM_THE_START:
        assert converted.before == 0
        assert gpu.peak.bytes == counters["max_memory_allocated"]  # byte for byte
    if part == "bare":  # (no history: the state when the snapshot was taken)
        assert gpu.peak.bytes == counters["memory_allocated"]
    no_history = any("holds no history" in w for w in analysis.metadata.warnings)
    assert no_history == (part in ("bare", "state"))


def test_a_wrapped_ring_buffer_is_said_and_its_lost_allocations_placed(tmp_path):
    """max_entries=300: the history starts mid-run. What it frees without having
    allocated, and what is live at the end without an allocation, were live
    before its first entry; with them the peak is still PyTorch's."""
    analysis, converted = _imported(DATA / "overflow.pickle", tmp_path)
    counters = _counters("overflow")
    snapshot = pickle.loads((DATA / "overflow.pickle").read_bytes())
    trace = snapshot["device_traces"][0]
    live, orphans = set(), 0
    for entry in trace:
        if entry["action"] == "alloc":
            live.add(entry["addr"])
        elif entry["action"] == "free_completed":
            orphans += entry["addr"] not in live
            live.discard(entry["addr"])
    live_unseen = [
        b
        for s in snapshot["segments"]
        for b in s["blocks"]
        if b["state"] == "active_allocated" and b["address"] not in live
    ]
    assert orphans and live_unseen and converted.before == orphans + len(live_unseen)
    assert any(
        "were live before the snapshot's first entry" in w for w in analysis.metadata.warnings
    )
    (gpu,) = analysis.devices
    assert gpu.peak.bytes == counters["max_memory_allocated"]


def test_expandable_segments_map_and_unmap_the_pool(tmp_path):
    analysis, _ = _imported(DATA / "expandable.pickle", tmp_path)
    snapshot = pickle.loads((DATA / "expandable.pickle").read_bytes())
    actions = {e["action"] for e in snapshot["device_traces"][0]}
    assert {"segment_map", "segment_unmap"} <= actions
    assert snapshot["allocator_settings"]["expandable_segments"] is True
    counters = _counters("expandable")
    (gpu,) = analysis.devices
    assert gpu.preallocation.pool_peak_bytes == counters["max_memory_reserved"]
    settings = analysis.metadata.allocator_settings
    assert settings["expandable_segments"] == "true"


def test_a_real_out_of_memory_is_explained_with_pytorchs_figures(tmp_path):
    """The oom entry: what was asked, what was in use (PyTorch's message says
    429.47 MiB allocated), what CUDA had free (138.63 GiB), at the line."""
    analysis, converted = _imported(DATA / "oom.pickle", tmp_path)
    counters = _counters("oom")
    assert converted.ooms == 1
    (failure,) = analysis.out_of_memory
    assert failure.requested_bytes == counters["observer"]["alloc"]
    assert f"{failure.in_use_bytes / 2**20:.2f} MiB is allocated by PyTorch" in counters["message"]
    free = counters["oom_entries"][0]["device_free"]
    assert free <= failure.free_bytes < free + 2**20 * 20  # (CUDA's, and the cached)
    assert f"{free / 2**30:.2f} GiB is free" in counters["message"]
    assert failure.location.endswith("record_torch_snapshots.py:208")
    # CUDA had room for the very segment: a limit refused it (the memory fraction),
    # which no snapshot records, but the figures settle.
    assert failure.verdict == LIMIT
    assert_valid_json(json.dumps(report_dict(analysis)))


def test_the_caching_allocators_rounding():
    sizes = np.array([0, 1, 512, 513, 1 << 20, (1 << 20) + 1, 3 * (1 << 20) + 5])
    assert block_sizes(sizes).tolist() == [
        512,
        512,
        512,
        1024,
        1 << 20,
        (1 << 20) + 512,
        3 * (1 << 20) + 512,
    ]
    # roundup_power2_divisions: 4 steps between 2 and 4 MiB for the interval [2, 4).
    divisions = divisions_by_interval({"2": 4})
    three_and_a_bit = np.array([3 * (1 << 20) + 5, 2 << 20, (2 << 20) + 1])
    assert block_sizes(three_and_a_bit, divisions).tolist() == [
        (3 << 20) + (1 << 19),
        2 << 20,
        (2 << 20) + (1 << 19),
    ]


# Snapshots built from the format (torch/csrc/cuda/Module.cpp's layout).


def _frames(line: int) -> list[dict]:
    return [
        {"name": "forward", "filename": "/site-packages/torch/nn/modules/linear.py", "line": 125},
        {"name": "step", "filename": "/home/me/train.py", "line": line},
    ]


def _entry(action: str, addr: int, size: int, t: int, frames=None) -> dict:
    entry = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": t}
    if frames is not None:
        entry["frames"] = frames
    return entry


def _snapshot(traces: list[list[dict]], segments=(), **rest) -> dict:
    return {"segments": list(segments), "device_traces": traces, **rest}


def _write(tmp_path: Path, snapshot: object, name: str = "s.pickle", protocol: int = 4) -> Path:
    path = tmp_path / name
    path.write_bytes(pickle.dumps(snapshot, protocol=protocol))
    return path


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_two_devices_each_in_its_own_list(tmp_path, protocol):
    """Entries belong to the list they are in: device 1's, not device 0's, and
    a device with no entries between them shifts nothing."""
    shared = _frames(10)
    traces = [
        [
            _entry("alloc", 0x1000, 1000, 1, shared),
            _entry("free_completed", 0x1000, 1000, 2, shared),
        ],
        [],
        [_entry("alloc", 0x9000, 5 << 20, 3, _frames(20))],
    ]
    path = _write(tmp_path, _snapshot(traces), protocol=protocol)
    analysis, converted = _imported(path, tmp_path)
    devices = {d.device: d for d in analysis.devices}
    assert set(devices) == {"GPU:0", "GPU:2"}
    assert devices["GPU:0"].peak.bytes == 1024
    assert devices["GPU:2"].peak.bytes == 5 << 20
    assert devices["GPU:2"].peak.groups[0].source == "/home/me/train.py:20"
    assert converted.entries == 3 and converted.allocations == 2


def test_a_device_whose_history_starts_first_keeps_its_allocations(tmp_path):
    """Each device has its own ring buffer: device 1's history may start before
    device 0's. Its allocation made before its history (freed at 30) still
    counts, at the trace's start, before everything else."""
    device0 = [_entry("alloc", 0x1000, 1 << 20, 1000)]
    device1 = [
        _entry("alloc", 0x90000, 1 << 20, 10),
        _entry("free_completed", 0x90000, 1 << 20, 20),
        _entry("free_completed", 0xA00000, 4 << 20, 30),
    ]
    analysis, _ = _imported(_write(tmp_path, _snapshot([device0, device1])), tmp_path)
    peaks = {d.device: d.peak.bytes for d in analysis.devices}
    assert peaks == {"GPU:0": 1 << 20, "GPU:1": 5 << 20}
    assert analysis.metadata.start_time_ns == 9 * 1000  # (1 us before the earliest)


def test_rounding_set_by_the_allocators_settings_is_applied(tmp_path):
    """roundup_power2_divisions comes after the entries: the import reads again
    with it. 4 steps between 2 and 4 MiB: 2 MiB + 1 byte takes 2.5 MiB."""
    settings = {"roundup_power2_divisions": {"2": 4}, "expandable_segments": False}
    traces = [[_entry("alloc", 0x1000, (2 << 20) + 1, 1, _frames(5))]]
    path = _write(tmp_path, _snapshot(traces, allocator_settings=settings))
    analysis, _ = _imported(path, tmp_path)
    (gpu,) = analysis.devices
    assert gpu.peak.bytes == (2 << 20) + (1 << 19)
    assert "2:4" in analysis.metadata.allocator_settings["roundup_power2_divisions"]


def test_torch_profilers_categories_become_regions(tmp_path):
    """_memory_viz._profile_to_snapshot names each allocation's category and
    gives no times: regions, and a microsecond apart."""
    traces = [
        [
            {**_entry("alloc", 0x1000, 4096, -1), "category": "parameter"},
            {**_entry("alloc", 0x3000, 8192, -1), "category": "activation"},
            {**_entry("alloc", 0x6000, 4096, -1), "category": "gradient"},
            {**_entry("alloc", 0x8000, 8192, -1), "category": "optimizer_state"},
            {**_entry("alloc", 0xB000, 512, -1), "category": "autograd_detail"},
            {**_entry("alloc", 0xC000, 256, -1), "category": "unknown"},
            # Made before the profile began (a parameter built before it): freed
            # in it, never allocated there.
            _entry("free_completed", 0x10000, 2048, -1),
        ]
    ]
    for entry in traces[0]:
        del entry["time_us"]
    analysis, _ = _imported(_write(tmp_path, _snapshot(traces)), tmp_path)
    (device,) = analysis.devices
    assert device.device == "device:0"
    regions = {g.region: g.bytes for g in device.peak.groups}
    assert regions["parameter"] == 4096 and regions["activation"] == 8192
    # The peak's kinds are the categories' (what the profiler did not
    # categorize is not told).
    kinds = {k.kind: k.bytes for k in device.kinds.kinds}
    assert kinds == {
        "parameters": 4096,
        "gradients": 4096,
        "optimizer_state": 8192,
        "activations": 8192 + 512,
        # (the 256 bytes as asked: no CUDA allocator rounded the host's memory)
        "not_told": 256 + 2048,
    }
    # What came before the profile is said, with what to change.
    (untold,) = [k for k in device.kinds.kinds if k.kind == "not_told"]
    assert any("before the profile's first entry" in how for how in untold.how)
    assert any("carry no times" in w for w in analysis.metadata.warnings)


CPU_SNAPSHOT = DATA.parent / "torch_cpu" / "mlp_adam.pickle"


def test_a_host_snapshot_has_no_pool_no_fragmentation_and_no_rounding(tmp_path):
    """torch.profiler's memory events of three Adam steps on the CPU, as PyTorch
    turns them into a snapshot (tests/tools/record_torch_cpu_snapshot.py): the
    peak is the bytes its entries hold live at their highest (with what was live
    before the first, which its frees name), to the byte; no pool, fragmentation
    or rounding is modeled for memory no pool held; the kinds are PyTorch's own
    categories and add up to the peak."""
    with CPU_SNAPSHOT.open("rb") as file:
        snapshot = pickle.load(file)
    (entries,) = snapshot["device_traces"]
    held, live = set(), 0  # a free of no address the profile holds: made before it
    for entry in entries:
        if entry["action"] == "alloc":
            held.add(entry["addr"])
        elif entry["action"] == "free_completed" and entry["addr"] not in held:
            live += entry["size"]
        elif entry["action"] == "free_completed":
            held.discard(entry["addr"])
    highest = live
    for entry in entries:
        if entry["action"] == "alloc":
            live += entry["size"]
        elif entry["action"] == "free_completed":
            live -= entry["size"]
        highest = max(highest, live)
    analysis, _ = _imported(CPU_SNAPSHOT, tmp_path)
    (device,) = analysis.devices
    assert device.peak.bytes == highest
    assert device.preallocation.pool_peak_bytes is None
    assert device.preallocation.pool_label == "not available"
    assert device.fragmentation.label == "not available" and device.headroom_bytes is None
    kinds = {k.kind: k.bytes for k in device.kinds.kinds}
    assert "overhead" not in kinds and sum(kinds.values()) == device.peak.bytes
    # Adam's state, as PyTorch's categories count it: two moments of the MLP's
    # 136,714 float32 parameters, and a float32 step count a parameter tensor.
    parameters = (256 * 512 + 512 + 512 * 10 + 10) * 4
    assert kinds["optimizer_state"] == 2 * parameters + 4 * 4
    # The parameters were made before the profile began: not told, and said so.
    assert kinds["not_told"] == parameters
    assert analysis.metadata.memory_settings is not None
    # The advice in PyTorch's words: Adam's second moment, dropped with SGD.
    (moments,) = [c for c in analysis.changes if c.key == "moments"]
    ((_, said, _),) = change_lines((moments,), analysis.metadata.words)
    assert "torch.optim.SGD(params, lr, momentum=0.9)" in said
    assert_valid_json(json.dumps(report_dict(analysis)))


def test_pieces_cut_anywhere_read_the_same(monkeypatch):
    """An opcode cut at the end of a piece is read again with the next: pieces of
    any size give the rows 8 MiB pieces give."""
    path = DATA / "gpt2.pickle"
    whole = _rows(path, False, monkeypatch)
    for size in (997, 4096, 65537):
        monkeypatch.setattr(walker, "PIECE_BYTES", size)
        cut = _rows(path, False, monkeypatch)
        assert all(np.array_equal(whole[0][k], cut[0][k]) for k in whole[0])
        assert cut[1:] == whole[1:]


def test_a_snapshot_that_would_run_code_is_refused_and_does_not(tmp_path):
    """pickle.load of this file runs a command; the walker (and the fallback's
    unpickler) refuse it in one line, and nothing runs."""
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = _write(tmp_path, _snapshot([[_entry("alloc", 1, 2, 3)]], annotations=Evil()))
    for unpickle in (False, True):
        with pytest.raises(TpumemError, match="more than plain data"), SnapshotWalk(path) as walk:
            if unpickle:
                walk._library = None
            list(walk.rows())
    assert not marker.exists()


@pytest.mark.parametrize(
    "damage",
    ["truncated", "trailing", "memo", "deep", "long_int", "long_string", "not_a_dict", "huge_int"],
)
def test_damaged_snapshots_are_one_clear_error(tmp_path, damage):
    good = pickle.dumps(_snapshot([[_entry("alloc", 1, 2, 3, _frames(1))] * 3]), protocol=4)
    data = {
        "truncated": good[: len(good) // 2],
        "trailing": good + b"more",
        # BINGET of a slot never filled, then STOP.
        "memo": b"\x80\x04h\x07.",
        "deep": b"\x80\x04" + b"]" * 100 + b"a" * 99 + b".",
        # LONG1 of 20 bytes.
        "long_int": b"\x80\x04\x8a\x14" + b"\x01" * 20 + b".",
        # BINUNICODE8 claiming more than any file holds.
        "long_string": b"\x80\x04\x8d" + (1 << 40).to_bytes(8, "little") + b"x",
        "not_a_dict": pickle.dumps([1, 2, 3], protocol=4),
        "huge_int": pickle.dumps(_snapshot([[_entry("alloc", 2**63 + 5, 2, 3)]]), protocol=4),
    }[damage]
    path = tmp_path / "damaged.pickle"
    path.write_bytes(data)
    with pytest.raises(TpumemError) as raised, SnapshotWalk(path) as walk:
        list(walk.rows())
    assert str(raised.value).startswith(str(path))
    assert "\n" not in str(raised.value)


def test_mangled_recorded_snapshots_read_or_are_refused(tmp_path):
    """Bytes changed, cut out and put in at random in the recorded snapshots: each
    reads, or is refused with a TpumemError; nothing else escapes (the C walker
    was also run so under AddressSanitizer)."""
    rng = random.Random(52)
    sources = [(DATA / f"{part}.pickle").read_bytes() for part in ("oom", "overflow", "state")]
    path = tmp_path / "mangled.pickle"
    for _ in range(300):
        data = bytearray(rng.choice(sources))
        for _ in range(rng.randrange(1, 6)):
            at = rng.randrange(len(data))
            if rng.random() < 0.5:
                data[at] = rng.randrange(256)
            elif rng.random() < 0.5:
                del data[at : at + rng.randrange(1, 64)]
            else:
                data[at:at] = rng.randbytes(rng.randrange(1, 16))
        path.write_bytes(bytes(data))
        try:
            with SnapshotWalk(path) as walk:
                for _ in walk.rows():
                    pass
                walk.live()
        except TpumemError as error:
            assert "\n" not in str(error)


def test_a_bad_snapshot_leaves_no_trace_and_says_one_line(tmp_path):
    entries = [_entry("alloc", 4096 * i, 2, i) for i in range(5000)]
    good = pickle.dumps(_snapshot([entries]), protocol=4)
    path = tmp_path / "cut.pickle"
    path.write_bytes(good[: len(good) - 7])
    target = tmp_path / "cut.tpumem"
    done = run_tpumem("import", str(path), "-o", str(target))
    assert done.returncode == 2 and not target.exists()
    assert done.stderr.count("\n") == 1 and "truncated" in done.stderr, done.stderr


def test_importing_a_snapshot_names_the_trace_after_it(tmp_path):
    path = _write(tmp_path, _snapshot([[_entry("alloc", 4096, 100, 1, _frames(3))]]), "run7.pickle")
    done = run_tpumem("import", str(path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run7.tpumem").exists()
    assert "1 trace entries (1 allocations)" in done.stdout
    assert ACTION["alloc"] == 1


def test_jax_and_pytorch_on_one_gpu_side_by_side(tmp_path):
    """The reference MLP (4 x 512, batch 64, Adam) on the same H200: JAX's trace
    as `tpumem profile` recorded it, PyTorch's from its snapshot."""
    _, converted = _imported(DATA / "mlp.pickle", tmp_path)
    assert converted.allocations
    jax_trace = Path(__file__).parent.parent / "data" / "gpu" / "mlp.tpumem"
    page = tmp_path / "both.html"
    done = run_tpumem(
        "compare",
        str(jax_trace),
        str(tmp_path / "mlp.tpumem"),
        "--html",
        str(page),
        "--width",
        "120",
    )
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if "Framework" in line)
    assert "jax (gpu)" in header and "pytorch (gpu)" in header
    peak = next(line for line in done.stdout.splitlines() if "Peak in use" in line)
    assert "111.3 MiB" in peak and "85.3 MiB" in peak  # (JAX's allocator; PyTorch's own)
    assert page.stat().st_size > 0


def test_check_fails_a_run_that_ended_out_of_memory_not_one_that_went_on(tmp_path):
    """A gate passes no run that ended out of memory, whatever its peak (JAX on
    the H200: its exception); the snapshot's script caught its failure and went
    on (it dumped the snapshot after), so its run is judged on its figures."""
    ended = run_tpumem("check", str(Path(__file__).parent.parent / "data" / "gpu" / "oom.tpumem"),
                       "--max-peak", "100GiB")  # fmt: skip
    assert ended.returncode == 1, ended.stderr
    assert "the run ended out of memory" in ended.stderr and "asked for 4.0 GiB" in ended.stderr
    _imported(DATA / "oom.pickle", tmp_path)
    went_on = run_tpumem("check", str(tmp_path / "oom.tpumem"), "--max-peak", "1GiB")
    assert went_on.returncode == 0, went_on.stderr
