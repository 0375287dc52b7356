"""The figures of the demo's four runs (`make demo`: the transformer in TensorFlow,
JAX, PyTorch/XLA and plain PyTorch, profiled on this CPU on 2026-12-05, the JAX
one with optax, the TensorFlow one with Keras' Adam) stay what they were when
recorded: each trace's JSON report, field by field, against the report kept beside
it. A change that moves a figure fails here; one that means to move it re-records
the reports (tests/tools/record_demo_figures.py) and says why."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from conftest import run_tpumem

DEMO = Path(__file__).parent.parent / "data" / "demo"
RUNS = ("tf_transformer", "jax_transformer", "torch_xla_transformer", "torch_transformer")


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


PARAMETERS = 536_064 * 4  # the demo transformer's parameters, float32
# Adam's two moments, and its step counter where the framework keeps it on the
# device: optax's `count` (int32), Keras' `iterations` (int64; its float32
# learning rate TensorFlow keeps outside the allocator); torch.optim's `step` is
# a CPU tensor, off PyTorch/XLA's device and in plain PyTorch's CPU memory: one
# float32 for each of the model's 37 parameter tensors.
COUNTERS = {
    "tf_transformer": 8,
    "jax_transformer": 4,
    "torch_xla_transformer": 0,
    "torch_transformer": 37 * 4,
}


def test_the_demo_frameworks_hold_the_same_parameters_and_adam_state(tmp_path):
    """Each framework's parameters and Adam's state, from its own objects, are
    the model's exactly; the comparison's kind rows are the reports' own."""
    traces = []
    for run in RUNS:
        trace = tmp_path / f"{run}.tpumem"
        trace.write_bytes(gzip.decompress((DEMO / f"{run}.tpumem.gz").read_bytes()))
        traces.append(str(trace))
        report = run_tpumem("report", str(trace), "--format", "json")
        (device,) = json.loads(report.stdout)["devices"]
        kinds = {k["kind"]: k["bytes"] for k in device["kinds"]}
        assert kinds["parameters"] == PARAMETERS, (run, kinds)
        assert kinds["optimizer_state"] == 2 * PARAMETERS + COUNTERS[run], (run, kinds)
    compared = run_tpumem("compare", *traces, "--format", "json")
    assert compared.returncode == 0, compared.stderr
    rows = {row["kind"]: row["bytes"] for row in json.loads(compared.stdout)["kinds"]}
    assert rows["parameters"] == [PARAMETERS] * len(RUNS)
    assert rows["optimizer_state"] == [2 * PARAMETERS + COUNTERS[run] for run in RUNS]
