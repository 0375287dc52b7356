"""A run of many traces, read as one, on traces of known figures (no framework):
the spread's arithmetic, what the report says of missing, repeated and unreadable
processes, worker processes agreeing with this one, and the names, ranks and bad
input of distributed runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_tpumem
from hostile_traces import _header, write
from tpumem.adapters.process_identity import (
    from_environment,
    from_tf_config,
    run_id_from_environment,
)
from tpumem.errors import TpumemError
from tpumem.outputs import fill_placeholders, placeholders, rename_trace
from tpumem.reading.many_traces import analyze_processes
from tpumem.trace.metadata import ProcessInfo

KiB = 1024


def _trace(path: Path, peak_kib: int, rank: int | None, count: int = 3, run: str = "r") -> Path:
    """A trace whose one device peaks at `peak_kib` KiB: two buffers, then one freed."""
    rows = [
        {"kind": "alloc", "time_ns": 10, "device": "CPU:0", "buffer_id": 1, "bytes": KiB},
        {"kind": "alloc", "time_ns": 20, "device": "CPU:0", "buffer_id": 2,
         "bytes": (peak_kib - 1) * KiB},
        {"kind": "free", "time_ns": 30, "device": "CPU:0", "buffer_id": 2,
         "bytes": (peak_kib - 1) * KiB},
    ]  # fmt: skip
    process = None if rank is None else {"index": rank, "count": count, "source": "RANK"}
    header = _header(host="h", pid=1000 + (rank or 0), run=run, process=process)
    return write(path, rows, header=header)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    directory = tmp_path / "run"
    directory.mkdir()
    for rank, peak in ((0, 64), (1, 96), (2, 80)):
        _trace(directory / f"h-{rank}.tpumem", peak, rank)
    return directory


def test_the_spread_of_peaks_is_exact(run):
    report = json.loads(run_tpumem("report", str(run), "-f", "json").stdout)
    assert [p["index"] for p in report["processes"]] == [0, 1, 2]
    assert [p["peak_bytes"] for p in report["processes"]] == [64 * KiB, 96 * KiB, 80 * KiB]
    peak = next(s for s in report["spread"] if s["figure"] == "peak")
    assert (peak["highest"], peak["lowest"]) == (96 * KiB, 64 * KiB)
    assert peak["mean"] == 80 * KiB and peak["difference"] == 32 * KiB
    assert peak["imbalance"] == pytest.approx(1 / 3)
    assert peak["highest_process"].endswith("h-1.tpumem")
    assert report["busiest_report"]["devices"][0]["peak"]["bytes"] == 96 * KiB
    # made here, with no recording's summaries beside them: read in full, and said
    (note,) = report["notes"]
    assert note.startswith("3 traces were read in full here (") and report["run_ids"] == ["r"]
    text = run_tpumem("report", str(run)).stdout
    assert "rank 1 peaks highest: 32.0 KiB more than rank 0 (33.3% of its peak)." in text


def test_worker_processes_give_what_this_process_gives(run):
    traces = sorted(run.glob("*.tpumem"))
    here, there = analyze_processes(traces, workers=0), analyze_processes(traces, workers=2)
    assert here.processes == there.processes
    assert here.spreads == there.spreads
    assert here.busiest.devices[0].peak == there.busiest.devices[0].peak


def test_check_gates_the_imbalance_and_every_process(run):
    assert run_tpumem("check", str(run), "--max-imbalance", "32KiB").returncode == 0
    assert run_tpumem("check", str(run), "--max-imbalance", "34%").returncode == 0
    failed = run_tpumem("check", str(run), "--max-imbalance", "33%", "--max-peak", "90KiB")
    assert failed.returncode == 1
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 2
    assert "rank 1 (" in lines[0] and "peak 96.0 KiB" in lines[0]
    assert "rank 1 peaks at 96.0 KiB, 32.0 KiB (33.3%) over rank 0's 64.0 KiB" in lines[1]


def test_what_the_run_lacks_is_said(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    _trace(run / "a.tpumem", 64, 0, count=4)
    _trace(run / "b.tpumem", 80, 1, count=4, run="other")
    _trace(run / "c.tpumem", 72, 1, count=4)
    (run / "d.tpumem").write_bytes(b"\xff\xff\xff\xff not a trace")
    report = json.loads(run_tpumem("report", str(run), "-f", "json").stdout)
    notes = report["notes"]
    assert any("2 different runs" in n for n in notes)
    assert any("no trace of ranks 2, 3" in n for n in notes)
    assert any("more than one trace says it is rank 1" in n for n in notes)
    assert any(n.startswith(f"left out {run / 'd.tpumem'}:") for n in notes)
    assert len(report["processes"]) == 3
    check = run_tpumem("check", str(run), "--max-peak", "1GiB")
    assert check.returncode == 1 and "left out" in check.stderr


def test_processes_without_ranks_are_named_by_host_and_pid(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for number in range(2):
        write(run / f"{number}.tpumem", header=_header(host="h", pid=50 + number))
    report = json.loads(run_tpumem("report", str(run), "-f", "json").stdout)
    assert [p["index"] for p in report["processes"]] == [None, None]
    assert "h pid 51" in run_tpumem("report", str(run)).stdout


@pytest.mark.parametrize(
    "args, words",
    [
        (["report", "{empty}"], ["no traces (.tpumem files) in this directory"]),
        (["check", "{one}", "--max-imbalance", "5%"], ["--max-imbalance compares the processes"]),
        (["check", "{run}", "--max-imbalance", "lots"], ["--max-imbalance"]),
        (["check", "{run}", "--baseline", "{one}"], ["--baseline compares one trace"]),
        (["report", "{run}", "--program", "x"], ["--program reports on one trace"]),
        (["diff", "{run}", "{one}"], ["not one of each"]),
        (["export", "tensorboard", "{run}", "{one}", "--logdir", "{tb}"], ["one run's directory"]),
    ],
)
def test_bad_input_about_runs_is_one_line(run, tmp_path, args, words):
    (tmp_path / "empty").mkdir()
    names = {
        "empty": tmp_path / "empty",
        "one": run / "h-0.tpumem",
        "run": run,
        "tb": tmp_path / "tb",
    }
    result = run_tpumem(*(a.format(**names) for a in args))
    assert_one_line_error(result, *words)


def test_profile_refuses_an_unknown_placeholder_before_anything_runs(tmp_path):
    (tmp_path / "s.py").write_text("import jax\nopen('ran', 'w')\n")
    result = subprocess.run(
        [sys.executable, "-m", "tpumem", "profile", "-o", "r/{user}.tpumem", "s.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert_one_line_error(result, "unknown placeholder {user}", "{host}, {rank}, {pid}")
    assert not (tmp_path / "ran").exists()


def test_a_brace_written_twice_is_one_brace_in_the_traces_name(tmp_path):
    """The error for a lone brace says a literal one is written twice: `-o
    '{{rank}}.tpumem'` names the trace `{rank}.tpumem` (it was `{{rank}}.tpumem`)."""
    (tmp_path / "s.py").write_text("import jax.numpy as jnp\nx = jnp.ones(4)\n")
    result = subprocess.run(
        [sys.executable, "-m", "tpumem", "profile", "-q", "-o", "{{rank}}.tpumem", "s.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in tmp_path.glob("*.tpumem")) == ["{rank}.tpumem"]


def test_placeholders_are_filled_and_checked():
    assert placeholders("run/{host}-{rank}.tpumem") == {"host", "rank"}
    assert placeholders("plain.tpumem") == set()
    for bad in ("{rank:03d}.tpumem", "{nope}.tpumem", "{rank!r}", "{unclosed"):
        with pytest.raises(TpumemError):
            placeholders(bad)
    assert fill_placeholders("{host}-{rank}-{pid}", "a b/c", 3, 77) == Path("a_b_c-3-77")
    assert fill_placeholders("{host}-{rank}", "h", None, 77) == Path("h-pid77")


def test_a_rename_never_replaces_a_trace_silently(tmp_path):
    old, new = tmp_path / "h-pid1.tpumem", tmp_path / "h-0.tpumem"
    old.write_bytes(b"mine")
    new.write_bytes(b"theirs")
    with pytest.raises(TpumemError, match="exists; the trace stays"):
        rename_trace(old, new, force=False)
    assert new.read_bytes() == b"theirs" and old.exists()
    rename_trace(old, new, force=True)
    assert new.read_bytes() == b"mine" and not old.exists()


def test_ranks_from_the_launchers_environment():
    assert from_environment({"RANK": "3", "WORLD_SIZE": "8"}) == ProcessInfo(3, 8, "RANK")
    assert from_environment({"SLURM_PROCID": "5", "SLURM_NTASKS": "6"}).index == 5
    assert from_environment({"OMPI_COMM_WORLD_RANK": "1"}) == ProcessInfo(
        1, None, "OMPI_COMM_WORLD_RANK"
    )
    tpu = {"TPU_WORKER_ID": "2", "TPU_WORKER_HOSTNAMES": "a,b,c,d"}
    assert from_environment(tpu) == ProcessInfo(2, 4, "TPU_WORKER_ID")
    assert from_environment({"RANK": "x"}) is None
    assert from_environment({}) is None
    # TensorFlow numbers the chief first, then the workers; a ps has no replica.
    cluster = {"chief": ["c:1"], "worker": ["w:1", "w:2"], "ps": ["p:1"]}
    config = {"cluster": cluster, "task": {"type": "worker", "index": 1}}
    assert from_tf_config(json.dumps(config)) == ProcessInfo(2, 3, "TF_CONFIG")
    config["task"] = {"type": "ps", "index": 0}
    assert from_tf_config(json.dumps(config)) is None
    assert from_tf_config("{not json") is None
    assert run_id_from_environment({"TORCHELASTIC_RUN_ID": "abc"}) == "torchrun:abc"
    assert run_id_from_environment({"SLURM_JOB_ID": "9", "SLURM_STEP_ID": "2"}) == "slurm:9.2"
    assert run_id_from_environment({"TPUMEM_RUN_ID": "mine", "SLURM_JOB_ID": "9"}) == "mine"


def test_names_from_a_runs_traces_reach_the_terminal_escaped(tmp_path):
    """Host names and file names of a run's traces hold terminal escapes: the run's
    report, check's breach lines and compare's note on stderr show them escaped."""
    host = "evil\x1b]0;pwned\x07\x1b[31m"
    plain, ranked = tmp_path / "plain", tmp_path / "ranked"
    plain.mkdir(), ranked.mkdir()
    for number, peak in ((0, 64), (1, 96)):
        rows = [{"kind": "alloc", "time_ns": 10, "device": "CPU:0", "buffer_id": 1,
                 "bytes": peak * KiB}]  # fmt: skip
        write(plain / f"{number}.tpumem", rows, header=_header(host=f"{host}{number}", pid=number))
        _trace(ranked / f"h\x1b[32m-{number}.tpumem", peak, number, count=2)
    results = [
        run_tpumem("report", str(plain)),
        run_tpumem("check", str(plain), "--max-imbalance", "1%"),
        run_tpumem("check", str(ranked), "--max-peak", "1KiB"),
        run_tpumem("compare", str(ranked), str(ranked / "h\x1b[32m-0.tpumem")),
    ]
    for result in results:
        assert result.returncode in (0, 1), result.stderr
        assert "\x1b" not in result.stdout + result.stderr
    assert "evil\\x1b]0;pwned" in results[0].stdout
    assert "evil\\x1b]0;pwned" in results[1].stderr
    assert "h\\x1b[32m-0.tpumem" in results[2].stderr
    assert "stands for its busiest" in results[3].stderr


def test_a_run_of_one_process_is_worded_in_the_singular(tmp_path):
    """A run's directory of one trace was "(1 processes)"; every count tpumem words
    goes through one rule (units.counted)."""
    run = tmp_path / "run"
    run.mkdir()
    _trace(run / "h-0.tpumem", 64, rank=0)
    for fmt in ("text", "md"):
        reported = run_tpumem("report", "run", "-f", fmt, cwd=tmp_path)
        assert reported.returncode == 0, reported.stderr
        assert "run (1 process, run r)" in reported.stdout, reported.stdout
        assert "1 processes" not in reported.stdout
    compared = run_tpumem("compare", "run", "run", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert "run (1 process) stands for its busiest" in compared.stderr


def test_counts_are_worded_by_one_rule():
    from tpumem.units import counted

    assert counted(1, "process", "processes") == "1 process"
    assert counted(2, "process", "processes") == "2 processes"
    assert counted(0, "trace") == "0 traces" and counted(1, "trace") == "1 trace"
    assert counted(12_345, "program") == "12,345 programs"
