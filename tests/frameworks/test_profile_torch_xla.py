"""`tpumem profile` on real PyTorch/XLA scripts (PJRT_DEVICE=CPU, which tpumem
sets itself), each run in its own processes."""

from __future__ import annotations

import json

import pytest

from conftest import run_tpumem
from profiling import (
    BAD_ENDINGS,
    EXAMPLES,
    last_json,
    profile,
    profile_bad_ending,
    run_plain,
    until_written,
)
from tpumem.adapters.torch_xla.debug_log import PRECISION_BYTES
from tpumem.analysis import analyze
from tpumem.trace.reader import load

MiB = 1 << 20

# Sizes the script knows: what is materialized at each sync. The 32 MiB repeat
# only exists inside the second graph; `torch_xla.sync()` materializes live
# tensors, and it is not one.
KNOWN_SIZES = """
import json
import torch
import torch_xla

MiB = 1 << 20
dev = torch_xla.device()
a = torch.ones(1024, 1024).to(dev)  # 4 MiB, put on the device at once
b = torch.zeros(2048, 1024, device=dev)  # 8 MiB, materialized by the sync
torch_xla.sync()
s = a.repeat(8, 1).sum()  # lazy: only the sum is ever a buffer
c = a * 2 + 1  # 4 MiB
torch_xla.sync()
peak = 4 * MiB + 8 * MiB + 4 * MiB + 4  # a, b, c, s
del b
d = c[:512] * 3  # 2 MiB, after b was freed
torch_xla.sync()
a.mul_(0.5)  # in place: the graph takes a's buffer over (aliasing)
torch_xla.sync()
print(json.dumps({"peak": peak, "sum": s.item()}))
"""


def line_of(start: str) -> int:
    lines = KNOWN_SIZES.splitlines()
    return next(n for n, line in enumerate(lines, 1) if line.startswith(start))


def test_the_peak_is_the_bytes_the_script_materialized(tmp_path):
    (tmp_path / "known.py").write_text(KNOWN_SIZES)
    result = profile(tmp_path, "-f", "json", "known.py")
    assert result.returncode == 0, result.stderr[-3000:]
    expected = last_json(result.stdout)["peak"]
    report = json.loads(result.stderr[: result.stderr.rindex("}") + 1])
    assert report["metadata"]["set_by_tpumem"] == {"PJRT_DEVICE": "CPU"}
    (device,) = analyze(load(tmp_path / "known.tpumem")).devices
    regions = dict(device.peak.by_region)
    temp = regions.pop("temp", 0)
    # Tensors' buffers exactly; the graph's temp is XLA's size, to PRECISION_BYTES.
    assert sum(regions.values()) == expected
    assert device.peak.bytes == expected + temp
    assert temp < 64 * 1024
    assert device.peak.step is None  # four syncs and no training step: syncs are not steps
    assert analyze(load(tmp_path / "known.tpumem")).metadata.extra.buffer_book.syncs == 4
    groups = {(g.op, g.region, g.shape, g.source) for g in device.peak.groups}
    assert ("to", "input", "[1024,1024]", f"known.py:{line_of('a = ')}") in groups
    assert ("zeros", "output", "[2048,1024]", f"known.py:{line_of('b = ')}") in groups
    assert ("add", "output", "[1024,1024]", f"known.py:{line_of('c = ')}") in groups
    assert "[8192,1024]" not in {g.shape for g in device.peak.groups}  # never a tensor
    analysis = analyze(load(tmp_path / "known.tpumem"))
    programs = analysis.programs
    # PyTorch/XLA's own analysis of the second graph: c and s are its outputs.
    assert any(abs(p.output_bytes - (4 * MiB + 4)) <= PRECISION_BYTES for p in programs)
    # The in-place update: the graph takes a's buffer over as its output.
    assert any(abs(p.alias_bytes - 4 * MiB) <= PRECISION_BYTES for p in programs)


@pytest.mark.parametrize(
    ("example", "sizes"),
    [
        ("torch_xla_mlp.py", ["--width", "256", "--layers", "2", "--steps", "4"]),
        (
            "torch_xla_transformer.py",
            ["--width", "64", "--layers", "1", "--seq", "32", "--steps", "4"],
        ),
    ],
)
def test_the_examples_profile_end_to_end(tmp_path, example, sizes):
    result = profile(tmp_path, "--full", "-o", "run.tpumem", str(EXAMPLES / example), *sizes)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = last_json(result.stdout)
    trace = load(tmp_path / "run.tpumem")
    analysis = analyze(trace)
    (device,) = analysis.devices
    # Each StepTrace (the example's steps) is a step mark.
    assert set(trace.numbers("step")[trace.valid("step")].tolist()) == set(range(4))
    regions = dict(device.peak.by_region)
    # Parameters, their gradients and Adam's two moments, all float32.
    assert regions["parameter"] == 4 * printed["params"]
    assert regions["gradient"] == 4 * printed["params"]
    assert regions["optimizer state"] == 2 * 4 * printed["params"]
    aliased = 3 * 4 * printed["params"] - PRECISION_BYTES
    steady = [p for p in analysis.programs if p.alias_bytes >= aliased]
    assert steady, "the step graph aliases parameters and both moments"
    assert "temp" in regions or not any(p.temp_bytes for p in analysis.programs)
    assert "Not exposed" in result.stderr and "UNIMPLEMENTED" in result.stderr


# A tensor that died while a pending graph still reads its buffer: the buffer
# lives until that graph has run, so it is freed after the graph's output was
# made. Read by an op the script called, also through another tensor that holds
# the same buffer, or by backward, which builds its graph in C++ where no op
# hook runs: w dies before it, and autograd's copy keeps its buffer for p's
# gradient. Each time the dead buffer is the 4 MiB `to`, and the reader's output
# is named by its (op, region).
READ_AFTER_DEATH = {
    "by an op": (
        ("mul", "output"),
        """
import torch, torch_xla
dev = torch_xla.device()
a = torch.ones(1024, 1024).to(dev)  # 4 MiB
torch_xla.sync()
b = a * 2  # pending: reads a's buffer
del a
torch_xla.sync()
""",
    ),
    "by an op, through an alias": (
        ("mul", "output"),
        """
import torch, torch_xla
dev = torch_xla.device()
a = torch.ones(1024, 1024).to(dev)  # 4 MiB
torch_xla.sync()
d = a.detach()  # the same buffer
torch_xla.sync()
b = d * 2  # pending: reads the buffer through d
del d, a
torch_xla.sync()
""",
    ),
    "by backward": (
        ("backward", "gradient"),
        """
import torch, torch_xla
dev = torch_xla.device()
p = torch.nn.Parameter(torch.ones(1024, 1024).to(dev))
w = torch.full((1024, 1024), 3.0).to(dev)  # 4 MiB
y = (p * w).sum()  # autograd keeps w: p's gradient is w
torch_xla.sync()
del w
y.backward()
torch_xla.sync()
""",
    ),
}


@pytest.mark.parametrize("reader", list(READ_AFTER_DEATH))
def test_a_dead_tensors_buffer_lives_until_the_graph_that_reads_it_has_run(tmp_path, reader):
    (op, region), script = READ_AFTER_DEATH[reader]
    (tmp_path / "dead.py").write_text(script)
    result = profile(tmp_path, "-q", "dead.py")
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load(tmp_path / "dead.tpumem")
    columns = ["kind", "time_ns", "buffer_id", "bytes", "op", "region"]
    rows = trace.table.select(columns).to_pylist()
    allocs = [r for r in rows if r["kind"] == "alloc"]
    (dead,) = [r for r in allocs if (r["op"], r["region"]) == ("to", "input")]
    (output,) = [r for r in allocs if (r["op"], r["region"]) == (op, region)]
    (freed,) = [r for r in rows if r["kind"] == "free" and r["buffer_id"] == dead["buffer_id"]]
    assert dead["bytes"] == output["bytes"] == 4 * MiB
    assert freed["time_ns"] >= output["time_ns"]
    assert analyze(trace).metadata.extra.buffer_book.freed_after_their_graph == 1


BEFORE_THE_END = (
    """
import time
import torch, torch_xla
kept = torch.ones(512, 1024).to(torch_xla.device())  # 2 MiB
doubled = kept * 2
torch_xla.sync()
"""
    + until_written("doubled = kept * 2")  # (the book's rows are written, its last)
    + """
{ending}
"""
)


@pytest.mark.parametrize("ending", sorted(BAD_ENDINGS))
def test_a_run_that_ends_badly_keeps_its_trace(tmp_path, ending):
    profile_bad_ending(tmp_path, BEFORE_THE_END, BAD_ENDINGS[ending])
    (device,) = analyze(load(tmp_path / "bad.tpumem")).devices
    assert device.peak.bytes >= 4 * MiB
    assert "[512,1024]" in {group.shape for group in device.peak.groups}


# A training loop that syncs three times a step (as PyTorch/XLA's own examples
# do: after the forward pass, after backward, after the update); step 2 holds a
# 16 MiB tensor, so the peak is in training step 2 whatever the syncs number.
# (Inside a StepTrace, PyTorch/XLA refuses a sync: the trace's end syncs.)
THREE_SYNCS_A_STEP = """
import torch
import torch_xla
{steps_import}
sync = {sync}
dev = torch_xla.device()
model = torch.nn.Linear(64, 64).to(dev)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.ones(32, 64).to(dev)
for step in range(5):
    big = None
    with {context}:
        loss = model(x).sum()
        sync()
        loss.backward()
        sync()
        optimizer.step()
        optimizer.zero_grad()
        big = torch.ones(4096, 1024, device=dev) * step if step == 2 else None
        sync()
"""
STEP_SOURCES = {  # (import, the step's context, sync)
    "optimizer step": ("import contextlib", "contextlib.nullcontext()", "torch_xla.sync"),
    "StepTrace": (
        "import torch_xla.debug.profiler as xp",
        "xp.StepTrace('train', step_num=step)",
        "lambda: None",
    ),
    "torch_xla.step()": ("", "torch_xla.step()", "torch_xla.sync"),
}


@pytest.mark.parametrize("source", list(STEP_SOURCES))
def test_steps_are_training_steps_not_syncs(tmp_path, source):
    steps_import, context, sync = STEP_SOURCES[source]
    script = THREE_SYNCS_A_STEP.format(steps_import=steps_import, context=context, sync=sync)
    (tmp_path / "loop.py").write_text(script)
    result = profile(tmp_path, "-q", "loop.py")
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load(tmp_path / "loop.tpumem")
    analysis = analyze(trace)
    assert analysis.steps == 5
    book = analysis.metadata.extra.buffer_book
    assert book.steps == 5 and book.steps_from == source
    assert book.syncs >= (5 if source == "StepTrace" else 15)
    (device,) = analysis.devices
    assert device.peak.step == 2
    assert device.peak.groups[0].shape == "[4096,1024]"


# torch.optim's steps run outside the op hook, and what they keep is read from
# the optimizer's state (optimizer_steps.py); an optimizer of the script's
# own goes through the hook, and a step that raised leaves it off only until the
# next step. Every tensor below lives to the end: 8 MiB in all.
OPTIMIZER_STEPS = """
import torch, torch_xla
dev = torch_xla.device()


class Doubler(torch.optim.Optimizer):  # keeps what it makes outside its state
    def __init__(self, params):
        super().__init__(params, {})
        self.kept = []

    @torch.no_grad()
    def step(self, closure=None):
        self.kept += [p.grad * 2 for group in self.param_groups for p in group["params"]]


def interrupted(*args):
    raise KeyboardInterrupt


w = torch.nn.Parameter(torch.ones(256, 1024).to(dev))  # 1 MiB, and its gradient
(w * 2).sum().backward()
adam = torch.optim.Adam([w])
adam.step()  # Adam's two moments: 2 MiB
torch_xla.sync()
doubler = Doubler([w])
doubler.step()  # 1 MiB
torch_xla.sync()
sgd = torch.optim.SGD([w], lr=0.1, momentum=0.9)
handle = sgd.register_step_pre_hook(interrupted)
try:
    sgd.step()
except KeyboardInterrupt:
    handle.remove()
adam.step()  # the next step gives the hook back
after = torch.ones(512, 1024, device=dev) * 3  # 2 MiB
torch_xla.sync()
sgd.step()  # its momentum: 1 MiB (the gradient's buffer, until it is updated)
sgd.step()
torch_xla.sync()
"""


def test_optimizer_steps_keep_what_their_state_holds(tmp_path):
    (tmp_path / "opt.py").write_text(OPTIMIZER_STEPS)
    result = profile(tmp_path, "-q", "opt.py")
    assert result.returncode == 0, result.stderr[-3000:]
    analysis = analyze(load(tmp_path / "opt.tpumem"))
    (device,) = analysis.devices
    regions = dict(device.peak.by_region)
    regions.pop("temp", None)
    # What the optimizers keep in their state (Adam's moments, SGD's momentum), as
    # such; what Doubler keeps elsewhere and `after` are outputs.
    assert regions == {
        "parameter": MiB,
        "gradient": MiB,
        "optimizer state": 3 * MiB,
        "output": 3 * MiB,
    }
    lines = OPTIMIZER_STEPS.splitlines()

    def source(start: str) -> str:
        return f"opt.py:{next(n for n, line in enumerate(lines, 1) if line.startswith(start))}"

    groups = {(g.op, g.shape, g.source): g.bytes for g in device.peak.groups}
    assert groups[("Adam.step", "[256,1024]", source("adam.step()"))] == 2 * MiB
    assert groups[("SGD.step", "[256,1024]", source("sgd.step()"))] == MiB
    assert groups[("mul", "[256,1024]", source("        self.kept +="))] == MiB
    assert groups[("mul", "[512,1024]", source("after = "))] == 2 * MiB
    assert analysis.metadata.extra.buffer_book.executions_not_observed == 0


def test_work_in_child_processes_is_said_plainly(tmp_path):
    script = (
        "import torch, torch_xla\n"
        "def work(index):\n"
        "    torch.ones(8, 8, device=torch_xla.device()).sum().item()\n"
        "if __name__ == '__main__':\n"
        "    torch_xla.launch(work)\n"
    )
    (tmp_path / "spawned.py").write_text(script)
    result = profile(tmp_path, "spawned.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tpumem profile --follow records it" in result.stderr
    assert "debug_single_process=True" in result.stderr
    assert any("child process" in w for w in load(tmp_path / "spawned.tpumem").warnings)


LATE_ENDS = """
import sys, time
import torch, torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.utils.utils as xu

if "late" in sys.argv:  # each graph's end is seen a while after it came (a loaded machine)
    xlac, wait = torch_xla._XLAC, torch_xla._XLAC._xla_wait_device_ops

    def late(*args):
        time.sleep(0.3)
        return wait(*args)

    xlac._xla_wait_device_ops = late
# PyTorch/XLA's MNIST test, shortened: MpDeviceLoader syncs at each batch.
device = torch_xla.device()
model = torch.nn.Sequential(
    torch.nn.Conv2d(1, 10, 5), torch.nn.MaxPool2d(2), torch.nn.ReLU(), torch.nn.BatchNorm2d(10),
    torch.nn.Conv2d(10, 20, 5), torch.nn.MaxPool2d(2), torch.nn.ReLU(), torch.nn.BatchNorm2d(20),
    torch.nn.Flatten(), torch.nn.Linear(320, 50), torch.nn.ReLU(), torch.nn.Linear(50, 10),
    torch.nn.LogSoftmax(dim=1),
).to(device)
sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
batches = (torch.zeros(128, 1, 28, 28), torch.zeros(128, dtype=torch.int64))
for data, target in pl.MpDeviceLoader(xu.SampleGenerator(batches, sample_count=20), device):
    sgd.zero_grad()
    F.nll_loss(model(data), target).backward()
    xm.optimizer_step(sgd)
"""


def test_the_peak_does_not_depend_on_when_a_graphs_end_is_seen(tmp_path):
    """A device runs its graphs one after another: the next step's run of a graph
    cannot overlap the last one's, however soon or late tpumem's thread sees the
    end (its wait for the device returns after the next run was launched)."""
    (tmp_path / "loop.py").write_text(LATE_ENDS)
    peaks = []
    for mode in ("prompt", "late"):
        result = profile(tmp_path, "-q", "-o", f"{mode}.tpumem", "loop.py", mode)
        assert result.returncode == 0, result.stderr[-3000:]
        (device,) = analyze(load(tmp_path / f"{mode}.tpumem")).devices
        # One run's temporaries live at a time: the training step's.
        temps = [g for g in device.peak.groups if g.region == "temp"]
        assert sum(g.count for g in temps) == 1, (mode, temps)
        peaks.append(device.peak.bytes)
    assert peaks[0] == peaks[1], peaks


# SPMD as FSDPv2 and the SPMD data-parallel examples use it: a weight sharded
# over 4 CPU devices, updated in place and synced ten times; a batch that dies
# each step.
SPMD_LOOP = """
import json
import numpy as np
import torch
import torch_xla
import torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs

xr.use_spmd()
count = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(count), (count, 1), ("data", "model"))
weight = torch.ones(1024, 256, device=torch_xla.device())
xs.mark_sharding(weight, mesh, ("data", None))
for step in range(10):
    batch = torch.full((1024, 256), float(step), device=torch_xla.device())
    xs.mark_sharding(batch, mesh, ("data", None))
    weight.mul_(0.5).add_(batch)
    torch_xla.sync()
print(json.dumps({"devices": count, "sum": float(weight.sum().cpu())}))
"""


SPMD_MODEL = """
import json
import numpy as np
import torch
import torch_xla
import torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs

xr.use_spmd()
count = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(count), (count, 1), ("fsdp", "model"))
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.Linear(1024, 8))
model = model.to(torch_xla.device())
xs.mark_sharding(model[0].weight, mesh, ("fsdp", None))  # sharded, FSDP-style
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.ones(64, 512, device=torch_xla.device())
xs.mark_sharding(x, mesh, ("fsdp", None))
for step in range(3):
    optimizer.zero_grad()
    model(x).pow(2).mean().backward()
    optimizer.step()
    torch_xla.sync()
# Device 0's bytes of the parameters, by PyTorch/XLA's own shards (XLA shards the
# next layer's weight too, by propagation).
import torch_xla.core.xla_model as xm
xm.wait_device_ops()
shards = torch_xla._XLAC._get_local_shards(list(model.parameters()))
held = sum(t.numel() * t.element_size() for each in shards for t, on in each if on == "CPU:0")
print(json.dumps({"devices": count, "parameters_per_device": held}))
"""


def test_under_spmd_the_figures_are_one_devices_shards(tmp_path):
    """pytorch/xla's FSDPv2 example over 4 CPU devices reported 101.6 MB on one
    "SPMD:0" where each device holds 58.3 MB: every tensor at its whole size.
    Each is now entered at the bytes device 0 holds of it (its shard), and the
    report says the run is SPMD over 4 devices."""
    (tmp_path / "model.py").write_text(SPMD_MODEL)
    env = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"}
    result = profile(tmp_path, "-q", "-o", "model.tpumem", "model.py", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = last_json(result.stdout)
    (device,) = analyze(load(tmp_path / "model.tpumem")).devices
    kinds = {k.kind: k.bytes for k in device.kinds.kinds}
    assert kinds["parameters"] == printed["parameters_per_device"]
    assert kinds["optimizer_state"] == 2 * printed["parameters_per_device"]
    report = run_tpumem("report", str(tmp_path / "model.tpumem"), "--full", "--width", "200")
    assert "SPMD over 4 devices" in report.stdout


def test_an_spmd_loop_runs_under_profile_as_it_runs_plain(tmp_path):
    """Under SPMD a tensor's shards are filled in by the runtime's thread when its
    graph has run; the book read handles and graph inputs before that, and the
    process died with SIGSEGV (4 of 6 profiled runs of three syncs, pytorch/xla's
    FSDPv2 example 8 of 8). Three runs of ten syncs each exit as plain Python
    does, with its output, and leave a trace that reads."""
    (tmp_path / "spmd.py").write_text(SPMD_LOOP)
    env = {"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "4"}
    plain = run_plain(tmp_path, "spmd.py", env=env)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert last_json(plain.stdout)["devices"] == 4
    for run in range(3):
        trace = f"spmd-{run}.tpumem"
        result = profile(tmp_path, "-q", "-o", trace, "spmd.py", env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        assert last_json(result.stdout) == last_json(plain.stdout)
        (device,) = analyze(load(tmp_path / trace)).devices
        # One device's figures: its quarter of the weight and of a batch, at least.
        shard = 1024 * 256 * 4 // 4
        assert 2 * shard <= device.peak.bytes < 2 * 1024 * 256 * 4
