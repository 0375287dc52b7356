"""`--capacity SIZE`: the run's allocations replayed through the BFC allocator model
with the pool capped at SIZE. Hand-built runs whose outcome is worked out below by
BFC's rules (growth from a 2 MiB region, doubling; best fit; a chunk split when it
is at least twice the request); the demo's real JAX and PyTorch/XLA buffer traces
through the command line. The model against real TensorFlow runs under limits is
in test_oom_tensorflow.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_tpumem
from tpumem.analysis import analyze
from tpumem.analysis.allocators.capacity import GROWTH, PREALLOCATED, pool_growth
from tpumem.analysis.oom import FRAGMENTED, NOT_ENOUGH
from tpumem.trace.reader import load
from tpumem.trace.schema import CAPTURE_GAP, CAPTURE_RESUMED

MiB = 1 << 20
DEMO = Path(__file__).parent.parent / "data" / "demo"


def _alloc(t: int, buffer: int, size: int, op: str) -> dict:
    return {
        "kind": "alloc",
        "time_ns": t,
        "device": "CPU:0",
        "buffer_id": buffer,
        "bytes": size,
        "op": op,
        "dtype": "float32",
        "shape": f"[{size // 4}]",
        "source": f"train.py:{10 + buffer}",
    }


def _free(t: int, buffer: int, size: int) -> dict:
    return {"kind": "free", "time_ns": t, "device": "CPU:0", "buffer_id": buffer, "bytes": size}


def pieces_rows() -> list[dict]:
    """a, b: 1 MiB each, the first region (2 MiB); c, d (1 MiB) and e (2 MiB) fill
    the second (4 MiB); a and c freed leave 1 MiB holes in each; f asks 3 MiB.
    At 8 MiB: the pool is 6 MiB, 4 MiB in use, 4 MiB free under the cap but the
    largest piece is the 2 MiB the cap leaves to grow by: f fails, fragmentation.
    At 5 MiB: the second region is 3 MiB (what the cap leaves); e finds 1 MiB
    free in it and no room to grow: not enough memory, short by 1 MiB."""
    return [
        _alloc(10, 1, MiB, "a"),
        _alloc(20, 2, MiB, "b"),
        _alloc(30, 3, MiB, "c"),
        _alloc(40, 4, MiB, "d"),
        _alloc(50, 5, 2 * MiB, "e"),
        _free(60, 1, MiB),
        _free(70, 3, MiB),
        _alloc(80, 6, 3 * MiB, "f"),
    ]


def test_free_memory_in_pieces_fails_as_fragmentation(make_trace):
    analysis = analyze(load(make_trace(pieces_rows())), capacity=8 * MiB)
    (check,) = analysis.capacity
    failure = check.failure
    assert failure is not None and check.pool_growth == GROWTH
    assert (failure.op, failure.location) == ("f", "train.py:16")
    assert (failure.requested_bytes, failure.in_use_bytes) == (3 * MiB, 4 * MiB)
    assert (failure.free_bytes, failure.largest_free_block_bytes) == (4 * MiB, 2 * MiB)
    assert failure.verdict == FRAGMENTED and failure.in_use_label == "modeled"
    assert [(g.op, g.bytes) for g in failure.live] == [("e", 2 * MiB), ("b", MiB), ("d", MiB)]
    assert failure.time_ns == 80


def test_too_little_memory_fails_short_by_the_difference(make_trace):
    (check,) = analyze(load(make_trace(pieces_rows())), capacity=5 * MiB).capacity
    failure = check.failure
    assert failure is not None and failure.op == "e" and failure.verdict == NOT_ENOUGH
    assert (failure.in_use_bytes, failure.free_bytes, failure.short_by_bytes) == (
        4 * MiB,
        MiB,
        MiB,
    )
    assert failure.largest_free_block_bytes == MiB  # the pool is the whole cap


def test_a_capacity_that_holds_says_the_headroom_and_the_smallest(make_trace):
    (check,) = analyze(load(make_trace(pieces_rows())), capacity=16 * MiB).capacity
    assert check.failure is None
    # The most in use: b, d, e and f, 7 MiB, when f is made (t=80).
    assert (check.headroom_bytes, check.tightest_time_ns) == (9 * MiB, 80)
    # Below 9 MiB the third region cannot hold f's 3 MiB (6 MiB already taken);
    # the bisection stops within 0.1% above it.
    assert 9 * MiB <= check.smallest_bytes <= 9 * MiB * 1.001
    assert analyze(load(make_trace(pieces_rows())), capacity=9 * MiB).capacity[0].failure is None
    smaller = analyze(load(make_trace(pieces_rows())), capacity=9 * MiB - 256).capacity[0]
    assert smaller.failure is not None and smaller.failure.op == "f"


def test_a_free_in_a_capture_gap_is_freed_at_the_gaps_end(make_trace):
    """x's free fell between two profiler sessions: the peak's rule (it ended in
    the gap) holds in the model too, so y finds x's room."""
    rows = [
        _alloc(10, 1, 4 * MiB, "x"),
        {"kind": "mark", "time_ns": 20, "text": CAPTURE_GAP},
        {"kind": "mark", "time_ns": 30, "text": CAPTURE_RESUMED},
        _alloc(40, 2, 4 * MiB, "y"),
        _free(50, 7, MiB),  # a buffer made before the capture: the model cannot place it
    ]
    (check,) = analyze(load(make_trace(rows)), capacity=6 * MiB).capacity
    assert check.failure is None and check.headroom_bytes == 2 * MiB
    assert check.unplaced_frees == 1


@pytest.mark.parametrize(
    ("backend", "env", "growth"),
    [
        ("cpu", {}, GROWTH),
        ("gpu", {}, PREALLOCATED),
        ("gpu", {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, GROWTH),
    ],
)
def test_the_pool_grows_as_the_runs_allocator_would(make_trace, backend, env, growth):
    trace = make_trace(pieces_rows(), {"framework": "jax", "backend": backend, "env": env})
    assert pool_growth(load(trace).metadata) == growth


def _demo(tmp_path, run: str) -> str:
    trace = tmp_path / f"{run}.tpumem"
    trace.write_bytes(gzip.decompress((DEMO / f"{run}.tpumem.gz").read_bytes()))
    return str(trace)


@pytest.mark.parametrize("run", ["jax_transformer", "torch_xla_transformer"])
def test_buffer_traces_through_the_command_line(tmp_path, run):
    trace = _demo(tmp_path, run)
    report = json.loads(run_tpumem("report", trace, "-f", "json").stdout)
    peak = report["devices"][0]["peak"]["bytes"]
    as_json = ("report", trace, "-f", "json", "--capacity")
    tight = json.loads(run_tpumem(*as_json, str(peak // 2)).stdout)
    (check,) = tight["capacity"]
    failure = check["failure"]
    assert failure is not None and failure["in_use_label"] == "modeled"
    assert failure["requested_bytes"] > failure["largest_free_block_bytes"]
    assert failure["limit_bytes"] == peak // 2 and failure["op"]
    smallest = check["smallest_bytes"]
    assert smallest >= peak  # no capacity below the peak of live bytes holds the run
    rows = tight["fit"]["rows"]
    assert all(row["needed_bytes"] >= smallest for row in rows)
    assert {row["smallest_capacity_bytes"] for row in rows if row["kind"] == "gpu"} == {smallest}
    roomy = json.loads(run_tpumem(*as_json, str(smallest)).stdout)
    (fits,) = roomy["capacity"]
    assert fits["failure"] is None and fits["headroom_bytes"] >= 0
    text = run_tpumem(
        "report", trace, "--full", "--width", "400", "--capacity", str(peak // 2)
    ).stdout
    assert text.splitlines()[1].startswith("At ") and "out of memory (modeled)" in text
    assert "Live at the modeled failure" in text and "smallest capacity (modeled)" in text
    markdown = run_tpumem("report", trace, "-f", "md", "--capacity", str(peak // 2)).stdout
    assert "Live at the modeled failure" in markdown


def test_check_fails_the_gate_on_a_modeled_failure(tmp_path):
    trace = _demo(tmp_path, "jax_transformer")
    failing = run_tpumem("check", trace, "--capacity", "20MiB")
    assert failing.returncode == 1
    assert "breach: CPU:0: at 20.0 MiB the allocator model runs out of memory" in failing.stderr
    holding = run_tpumem("check", trace, "--capacity", "1GiB")
    assert holding.returncode == 0, holding.stderr


def test_compare_shows_each_run_at_the_capacity(tmp_path):
    runs = [_demo(tmp_path, "jax_transformer"), _demo(tmp_path, "torch_xla_transformer")]
    result = run_tpumem("compare", *runs, "-f", "json", "--capacity", "60MiB")
    assert result.returncode == 0, result.stderr
    rows = {row["figure"]: row for row in json.loads(result.stdout)["rows"]}
    smallest = rows["Smallest capacity that holds it"]
    assert all(isinstance(v, int) for v in smallest["values"])
    assert smallest["labels"] == ["modeled", "modeled"]
    asked, room = rows["At 60.0 MiB: out of memory, asked for"], rows["At 60.0 MiB: headroom"]
    for i, value in enumerate(smallest["values"]):
        # A run the model holds in 60 MiB has headroom there; one it does not, a failure.
        holds = value <= 60 * MiB
        assert (room["values"][i] is not None) == holds != (asked["values"][i] is not None)


@pytest.mark.parametrize("size", ["0", "lots", "-5MiB"])
def test_a_capacity_that_is_not_a_size_is_one_clear_line(tmp_path, size):
    trace = _demo(tmp_path, "jax_transformer")
    assert_one_line_error(run_tpumem("report", trace, "--capacity", size), "--capacity")
