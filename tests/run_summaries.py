"""A run's report from its recordings' summaries against the same run's report
from its traces alone (a copy without the summaries): for the tests of runs that
the frameworks recorded, and of runs made here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import run_tpumem
from hostile_traces import _header, write
from tpumem.trace.stack_rows import stack_text

KiB = 1024
LEAK = 128 * KiB  # what each step of a ranked_trace keeps


def ranked_trace(path: Path, peak_kib: int, rank: int, steps: int = 0) -> Path:
    """A trace whose one device peaks at `peak_kib` KiB (two buffers, one freed),
    with `steps` step marks, each keeping LEAK more (a leak)."""
    rows = [
        {"kind": "alloc", "time_ns": 10, "device": "CPU:0", "buffer_id": 1, "bytes": KiB},
        {"kind": "alloc", "time_ns": 20, "device": "CPU:0", "buffer_id": 2,
         "bytes": (peak_kib - 1) * KiB, "source": "train.py:7"},
        {"kind": "free", "time_ns": 30, "device": "CPU:0", "buffer_id": 2,
         "bytes": (peak_kib - 1) * KiB},
    ]  # fmt: skip
    frames = [("train.py", 3, "<module>"), ("train.py", 9, "step")]
    rows.insert(0, {"kind": "stack", "time_ns": 0, "stack": 1, "text": stack_text(frames)})
    for step in range(steps):
        time = 100 + step * 100
        rows += [
            {"kind": "mark", "time_ns": time, "text": "step", "step": step},
            {"kind": "alloc", "time_ns": time + 10, "device": "CPU:0",
             "buffer_id": 10 + step, "bytes": LEAK, "stack": 1},
        ]  # fmt: skip
    process = {"index": rank, "count": 3, "source": "RANK"}
    return write(path, rows, header=_header(host="h", pid=1000 + rank, run="r", process=process))


def bare_copy(run: Path, into: Path) -> Path:
    """The run's traces, without their summaries, in `into`."""
    into.mkdir()
    for trace in run.glob("*.tpumem"):
        shutil.copy(trace, into / trace.name)
    return into


def figures(report: dict) -> dict:
    """A run report (JSON) without what says where it was read from."""
    for process in report["processes"]:
        del process["made_from"]
        process["path"] = Path(process["path"]).name
    for spread in report["spread"]:
        spread["highest_process"] = Path(spread["highest_process"]).name
        spread["lowest_process"] = Path(spread["lowest_process"]).name
    report["busiest"] = Path(report["busiest"]).name
    del report["notes"], report["path"], report["busiest_report"]["path"]
    return report


def assert_summaries_stand_for_the_traces(run: Path, scratch: Path) -> None:
    """Every trace of the run has its summary, and the run's report from them is
    the report from the traces alone, field by field."""
    traces = sorted(run.glob("*.tpumem"))
    assert traces and all(Path(f"{t}.summary.json").is_file() for t in traces), list(run.iterdir())
    summarised = run_tpumem("report", str(run), "-f", "json")
    assert summarised.returncode == 0, summarised.stderr
    full = run_tpumem("report", str(bare_copy(run, scratch)), "-f", "json")
    assert full.returncode == 0, full.stderr
    a, b = json.loads(summarised.stdout), json.loads(full.stdout)
    assert {p["made_from"] for p in a["processes"]} == {"summary"}
    assert {p["made_from"] for p in b["processes"]} == {"trace"}
    assert not any("read in full" in note for note in a["notes"])
    assert figures(a) == figures(b)
