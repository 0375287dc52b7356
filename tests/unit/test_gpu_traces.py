"""The JAX adapter's GPU path, on traces recorded on an NVIDIA H100 (jax 0.11.2,
tests/tools/record_gpu_traces.sh): allocator events from back-to-back profiler
sessions, memory_stats() counters, JAX's default preallocation and a real
out-of-memory. CI has no GPU; these traces are what that path wrote there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_tpumem
from tpumem.analysis import analyze
from tpumem.report.rows import device_rows, fact_rows
from tpumem.trace.reader import load

GPU = Path(__file__).parent.parent / "data" / "gpu"
STATS = json.loads((GPU / "known.json").read_text())  # memory_stats() at the script's end


def _gpu(name: str):
    analysis = analyze(load(GPU / name))
    devices = {d.device: d for d in analysis.devices}
    return analysis, devices["GPU:0"], devices


def test_the_peak_is_the_allocators_own():
    analysis, gpu, devices = _gpu("known.tpumem")
    assert analysis.framework == "jax" and analysis.backend == "gpu"
    assert gpu.fidelity == "allocator" and gpu.peak_label == "measured"
    assert gpu.peak.bytes == STATS["peak_bytes_in_use"]  # 121.0 MiB, byte for byte
    assert gpu.counters.reported_peak_bytes == STATS["peak_bytes_in_use"]
    # The pinned host staging allocator is its own device, not the GPU's memory.
    assert set(devices) == {"GPU:0", "host-pinned"}
    capture = analysis.metadata.capture
    assert capture.chunks >= 2 and capture.covered_ns > 0
    assert 0.9 < capture.covered_fraction <= 1.0


def test_jax_preallocates_three_quarters_and_the_report_says_so():
    analysis, gpu, _ = _gpu("mlp.tpumem")
    printed_peak = 116_742_400  # what examples/jax_mlp.py read from memory_stats() there
    assert gpu.peak.bytes == printed_peak
    pre = gpu.preallocation
    assert pre.pool_label == "measured" and pre.pool_peak_bytes == STATS["pool_bytes"]
    assert pre.limit_bytes == STATS["bytes_limit"]
    assert pre.unused_bytes == pre.pool_peak_bytes - printed_peak
    # 75% of the memory JAX found free on the 80 GB card: about 59.4 GiB.
    assert 0.70 * 80 * 2**30 < pre.pool_peak_bytes < 0.75 * 81_559 * 2**20
    fit = {row.accelerator: row for row in analysis.fit.rows}
    assert fit["H100 80GB"].setting == "XLA_CLIENT_MEM_FRACTION=0.01"
    assert dict((r[0], r[2]) for r in device_rows(gpu))["Pool held from device"].startswith(
        "measured (the allocator's own pool_bytes)"
    )


def test_a_real_out_of_memory_is_reported_with_its_limit():
    analysis, gpu, _ = _gpu("oom.tpumem")
    exit_info = analysis.metadata.exit
    assert exit_info.code == 1 and "RESOURCE_EXHAUSTED" in exit_info.exception
    assert analysis.metadata.env == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.02"}
    limit = gpu.preallocation.limit_bytes
    assert limit == pytest.approx(0.02 * 85e9, rel=0.01)
    # The 1 GiB array fit; the 4 GiB one did not, and was never allocated.
    assert 2**30 <= gpu.peak.bytes < limit < 2**30 + 4 * 2**30
    ended = dict(fact_rows(analysis))["Ended"]
    assert ended.startswith("uncaught exception: JaxRuntimeError: RESOURCE_EXHAUSTED: Out of")


def test_the_gpu_traces_report_and_export_as_any_other(tmp_path):
    for name in ("known", "mlp", "oom"):
        result = run_tpumem("report", str(GPU / f"{name}.tpumem"), "-f", "json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["backend"] == "gpu"
    result = run_tpumem(
        "export", "tensorboard", str(GPU / "known.tpumem"), "--logdir", str(tmp_path / "tb")
    )
    assert result.returncode == 0, result.stderr
    assert list((tmp_path / "tb").rglob("*.xplane.pb"))


def test_a_distributed_run_on_the_gpu_reads_as_one():
    """Two jax.distributed processes on one H100 (tests/tools/record_gpu_run.sh),
    each under `tpumem profile -o 'run/{host}-{rank}.tpumem'`: the adapter waited
    for the script's jax.distributed.initialize(); each trace holds its process's
    allocator events under the GPU's own name (GPU:0 on its host, though its global
    id is the rank's), its peak the allocator's own byte for byte, and the run's
    report the 8 MiB more that rank 1 keeps."""
    run = GPU / "run"
    result = run_tpumem("report", str(run), "-f", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [(p["index"], p["count"]) for p in report["processes"]] == [(0, 2), (1, 2)]
    assert len(report["run_ids"]) == 1
    for process in report["processes"]:
        stats = json.loads((run / f"rank-{process['index']}.json").read_text())
        assert stats["process_count"] == 2
        assert process["peak_device"] == "GPU:0" and process["backend"] == "gpu"
        assert process["peak_bytes"] == stats["peak_bytes_in_use"]
        assert process["peak_label"] == "measured"
        # The pool is the allocator's own (its samples joined the events' device).
        assert process["pool_bytes"] == stats["bytes_limit"]
    peak = next(s for s in report["spread"] if s["figure"] == "peak")
    assert peak["difference"] == 8 * 1024 * 1024
    assert peak["highest_process"].endswith("-1.tpumem")
