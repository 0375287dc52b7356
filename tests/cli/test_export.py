"""`tpumem export tensorboard`: XProf's own converter, TensorBoard's own event
reader and a real TensorBoard server read what tpumem writes. Each of them runs
in its own process (XProf's converter and TensorBoard load TensorFlow when it is
installed)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.parse

from conftest import run_tpumem
from profiling import EXAMPLES, profile
from tensorboard_server import get, tensorboard_server
from tpumem.analysis import analyze
from tpumem.trace.reader import load
from xprof_runner import run_python, xprof_memory_profile

SCALARS = """
import json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
accumulator = EventAccumulator(sys.argv[1])
accumulator.Reload()
print(json.dumps({tag: [[e.step, e.value] for e in accumulator.Scalars(tag)]
                  for tag in accumulator.Tags()["scalars"]}))
"""


def _loop_trace(make_trace, name="loop.tpumem", metadata=None):
    rows = [{"kind": "mark", "time_ns": 0, "text": "step", "step": 0}]
    for step in range(3):
        t = 1000 * (step + 1)
        rows.append({"kind": "mark", "time_ns": t, "text": "step", "step": step + 1})
        rows.append(
            {
                "kind": "alloc",
                "time_ns": t + 1,
                "device": "CPU:0",
                "buffer_id": step,
                "bytes": 4096 * (step + 1),
                "op": f"matmul{step}",
                "region": "output",
                "dtype": "float32",
                "shape": "[32,32]",
            }
        )
        rows.append(
            {
                "kind": "free",
                "time_ns": t + 500,
                "device": "CPU:0",
                "buffer_id": step,
                "bytes": 4096 * (step + 1),
            }
        )
    return make_trace(rows, {"start_time_ns": 10**18, **(metadata or {})}, name=name)


def test_xprof_reads_the_peak_its_time_and_the_ops(make_trace, tmp_path):
    trace = _loop_trace(make_trace)
    logdir = tmp_path / "tb"
    result = run_tpumem("export", "tensorboard", str(trace), "--logdir", str(logdir))
    assert result.returncode == 0, result.stderr
    xplane = logdir / "plugins" / "profile" / "loop" / "localhost.xplane.pb"
    (converted,) = xprof_memory_profile(xplane).values()
    analysis = analyze(load(trace))
    assert set(converted) == {d.device for d in analysis.devices}
    (device,) = analysis.devices
    assert converted["CPU:0"]["peak"] == device.peak.bytes == 12288
    assert converted["CPU:0"]["peak_time_ps"] == device.peak.last_time_ns * 1000
    # At the peak one buffer is live, made by matmul2: XProf names it, with its
    # region, dtype and shape.
    assert converted["CPU:0"]["active"] == 1
    assert converted["CPU:0"]["at_peak"] == [
        {
            "tfOpName": "matmul2",
            "regionType": "output",
            "dataType": "float",
            "tensorShape": "[32,32]",
        }
    ]


def test_scalars_read_back_with_tensorboards_reader(make_trace, tmp_path):
    trace = _loop_trace(make_trace)
    assert (
        run_tpumem("export", "tensorboard", str(trace), "--logdir", str(tmp_path)).returncode == 0
    )
    scalars = run_python(SCALARS, str(tmp_path / "loop"))
    # One point per training step: the step's largest bytes in use.
    # In MiB, as the SCALARS tab's axis shows them (float32: 4 KiB exactly).
    assert scalars["tpumem/CPU:0/in_use_MiB"] == [[1, 4 / 1024], [2, 8 / 1024], [3, 12 / 1024]]
    assert set(scalars) >= {"tpumem/CPU:0/fragmentation", "tpumem/CPU:0/pool_MiB"}


def test_hosts_of_one_imported_run_export_as_one_run(make_trace, tmp_path):
    first = _loop_trace(make_trace, "r.h1.tpumem", {"source": "import", "run": "r", "host": "h1"})
    second = _loop_trace(make_trace, "r.h2.tpumem", {"source": "import", "run": "r", "host": "h2"})
    result = run_tpumem("export", "tensorboard", str(first), str(second), "--logdir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    files = sorted(p.name for p in (tmp_path / "plugins" / "profile" / "r").iterdir())
    assert files == ["h1.xplane.pb", "h2.xplane.pb"]
    converted = xprof_memory_profile(*(tmp_path / "plugins" / "profile" / "r").iterdir())
    assert [v["CPU:0"]["peak"] for v in converted.values()] == [12288, 12288]
    again = run_tpumem("export", "tensorboard", str(first), str(first), "--logdir", str(tmp_path))
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1


def test_bad_input_is_one_line(tmp_path):
    result = run_tpumem(
        "export", "tensorboard", str(tmp_path / "none.tpumem"), "--logdir", str(tmp_path)
    )
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1


def test_three_frameworks_export_and_a_tensorboard_server_serves_them(tmp_path):
    """The MLP in TensorFlow, JAX and PyTorch/XLA, each profiled with
    --tensorboard: XProf's converter and a real TensorBoard server agree with
    tpumem's analysis of each trace."""
    logdir = tmp_path / "tb"
    runs = {}
    for script in ("tf_mlp.py", "jax_mlp.py", "torch_xla_mlp.py"):
        trace = tmp_path / script.replace(".py", ".tpumem")
        result = profile(
            tmp_path,
            "-q",
            "-o",
            str(trace),
            "--tensorboard",
            str(logdir),
            str(EXAMPLES / script),
            "--steps",
            "2",
        )
        assert result.returncode == 0, result.stderr[-3000:]
        runs[trace.stem] = analyze(load(trace))
    xplanes = {run: logdir / "plugins" / "profile" / run for run in runs}
    converted = xprof_memory_profile(*(next(d.glob("*.xplane.pb")) for d in xplanes.values()))
    for run, analysis in runs.items():
        (by_allocator,) = [v for k, v in converted.items() if f"/{run}/" in k]
        assert set(by_allocator) == {d.device for d in analysis.devices}
        for device in analysis.devices:
            assert by_allocator[device.device]["peak"] == device.peak.bytes
            assert by_allocator[device.device]["peak_time_ps"] == device.peak.last_time_ns * 1000
            assert by_allocator[device.device]["active"] > 0
    with tensorboard_server(logdir) as base:
        deadline = time.monotonic() + 60
        while set(json.loads(get(f"{base}/data/plugin/profile/runs"))) < set(runs):
            assert time.monotonic() < deadline, "the profile plugin never listed the runs"
            time.sleep(1)
        for run, analysis in runs.items():
            tools = json.loads(get(f"{base}/data/plugin/profile/run_tools?run={run}"))
            assert "memory_profile" in tools
            hosts = json.loads(
                get(f"{base}/data/plugin/profile/hosts?run={run}&tag=memory_profile")
            )
            host = hosts[0]["hostname"]
            data = json.loads(
                get(f"{base}/data/plugin/profile/data?run={run}&tag=memory_profile&host={host}")
            )
            device = analysis.devices[0]
            summary = data["memoryProfilePerAllocator"][device.device]["profileSummary"]
            assert int(summary["peakStats"]["peakBytesInUse"]) == device.peak.bytes
            if run == "jax_mlp":  # its compiled programs, in XProf's memory_viewer
                assert "memory_viewer" in tools
                modules = get(f"{base}/data/plugin/profile/module_list?run={run}").decode()
                step = next(m for m in modules.split(",") if m.startswith("jit_step("))
                viewer = json.loads(
                    get(
                        f"{base}/data/plugin/profile/data?run={run}&tag=memory_viewer"
                        f"&host={host}&module_name={urllib.parse.quote(step)}"
                    )
                )
                heap = next(p.heap for p in analysis.compiled if p.name == "jit_step")
                assert round(viewer["peakHeapMib"] * (1 << 20)) == heap.peak_bytes
        scalar_runs = json.loads(get(f"{base}/data/runs"))
        assert set(runs) <= set(scalar_runs)
        # Where the export says each run's memory is, Chromium lands on the Memory
        # Profile with the run's peak, not on the Overview page.
        opened = re.findall(r"http://localhost:6006(\S+)", result.stderr)
        assert len(opened) == 1 and "run=torch_xla_mlp" in opened[0]
        text = _page_text(base + opened[0])
        assert "Memory Profile Summary" in text, text[:2000]
        peak = runs["torch_xla_mlp"].devices[0].peak.bytes
        assert f"{peak / 2**20:.2f} MiB" in text


def _page_text(url: str) -> str:
    """The text a headless Chromium shows at `url`, once XProf has drawn."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=shutil.which("chromium"), args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url, wait_until="networkidle")
        page.get_by_text("Memory Profile Summary").wait_for(timeout=60_000)
        text = page.locator("body").inner_text()
        browser.close()
    return text


def test_exporting_imports_no_framework_and_no_tensorboard(make_trace, tmp_path):
    trace = _loop_trace(make_trace)
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from tpumem.export.tensorboard import export_tensorboard\n"
        f"export_tensorboard([Path({str(trace)!r})], Path({str(tmp_path / 'tb')!r}))\n"
        "heavy = {'tensorflow', 'tensorboard', 'jax', 'torch', 'torch_xla', 'xprof'}\n"
        "print(sorted(heavy & {name.split('.')[0] for name in sys.modules}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    assert (tmp_path / "tb" / "plugins" / "profile" / "loop" / "localhost.xplane.pb").exists()


def test_runs_of_one_name_in_different_directories_stay_apart(make_trace, tmp_path):
    """Three projects' train.tpumem went into one TensorBoard run as its three
    "hosts": each is a run of its own, named by what tells its path apart."""
    traces = []
    for version in ("v1", "v2", "v3"):
        (tmp_path / version).mkdir()
        traces.append(
            _loop_trace(make_trace, f"{version}/train.tpumem", {"pid": 100 + len(traces)})
        )
    logdir = tmp_path / "tb"
    result = run_tpumem("export", "tensorboard", *map(str, traces), "--logdir", str(logdir))
    assert result.returncode == 0, result.stderr
    runs = sorted(p.name for p in (logdir / "plugins" / "profile").iterdir())
    assert runs == ["v1_train", "v2_train", "v3_train"]
    for run in runs:
        assert [p.name for p in (logdir / "plugins" / "profile" / run).glob("*.xplane.pb")] == [
            "localhost.xplane.pb"
        ]
        assert list((logdir / run).glob("events.out.tfevents.*"))
    # One trace given twice: two runs, numbered, not one run of a host twice.
    again = tmp_path / "again"
    result = run_tpumem(
        "export", "tensorboard", str(traces[0]), str(traces[0]), "--logdir", str(again)
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (again / "plugins" / "profile").iterdir()) == [
        "train",
        "train-2",
    ]
