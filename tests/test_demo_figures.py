"""The figures of the demo's three runs (`make demo`: the transformer in TensorFlow,
JAX and PyTorch/XLA, profiled on this CPU on 2026-11-23) stay what they were when
recorded: each trace's JSON report, field by field, against the report kept beside
it. A change that moves a figure fails here; one that means to move it re-records
the reports (tests/tools/record_demo_figures.py) and says why."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import run_tpumem

DEMO = Path(__file__).parent / "data" / "demo"
RUNS = ("tf_transformer", "jax_transformer", "torch_xla_transformer")


def differences(kept: object, now: object, where: str = "") -> list[str]:
    """Where two JSON values differ, by path."""
    if isinstance(kept, dict) and isinstance(now, dict):
        found = []
        for key in sorted(set(kept) | set(now)):
            if key not in now or key not in kept:
                found.append(f"{where}.{key}: {'gone' if key not in now else 'new'}")
            else:
                found += differences(kept[key], now[key], f"{where}.{key}")
        return found
    if isinstance(kept, list) and isinstance(now, list):
        if len(kept) != len(now):
            return [f"{where}: {len(kept)} items, now {len(now)}"]
        pairs = enumerate(zip(kept, now, strict=True))
        return [d for i, (a, b) in pairs for d in differences(a, b, f"{where}[{i}]")]
    return [] if kept == now else [f"{where}: {kept!r} -> {now!r}"]


@pytest.mark.parametrize("run", RUNS)
def test_the_demo_runs_keep_their_figures(tmp_path, run):
    trace = tmp_path / f"{run}.tpumem"
    trace.write_bytes(gzip.decompress((DEMO / f"{run}.tpumem.gz").read_bytes()))
    result = run_tpumem("report", str(trace), "--format", "json")
    assert result.returncode == 0, result.stderr
    now = json.loads(result.stdout)
    kept = json.loads(gzip.decompress((DEMO / f"{run}.report.json.gz").read_bytes()))
    kept.pop("path"), now.pop("path")  # where each was read from
    assert now["devices"], "a demo run without devices"
    found = differences(kept, now)
    assert found == [], "\n".join(found[:20])
