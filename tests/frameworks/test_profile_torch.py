"""`tpumem profile` on plain PyTorch scripts on the CPU, each run in its own
processes: the peak against PyTorch's own profiler, the kinds against what the
model and the optimizer hold, the lines, and a script's own profiler."""

from __future__ import annotations

import numpy as np

from conftest import printed_report
from profiling import last_json, profile, run_plain
from tpumem.analysis import analyze
from tpumem.trace.reader import load
from tpumem.trace.schema import CAPTURE_GAP, CAPTURE_RESUMED, MARK

# An MLP trained with Adam for three steps. With OWN_PROFILER set, the script
# runs PyTorch's profiler itself from its start and prints the peak that the
# profiler counts (its allocator's bytes allocated, at their highest).
MLP_ADAM = """
import json
import os

import torch

own = None
if os.environ.get("OWN_PROFILER"):  # the script's own profiler, from the start
    activities = [torch.profiler.ProfilerActivity.CPU]
    own = torch.profiler.profile(activities=activities, profile_memory=True)
    own.start()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 10))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
for step in range(3):
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
state = [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
held = {
    "parameters": sum(p.untyped_storage().nbytes() for p in model.parameters()),
    "optimizer_state": sum(t.untyped_storage().nbytes() for t in state),
    "input": x.untyped_storage().nbytes(),
}
if own is not None:
    own.stop()
    pending, peak = list(own.profiler.kineto_results.experimental_event_tree()), 0
    while pending:
        event = pending.pop()
        pending.extend(event.children)
        if event.tag == torch._C._profiler._EventType.Allocation:
            peak = max(peak, event.extra_fields.total_allocated)
    held["profiler_peak"] = peak
print(json.dumps(held))
"""


def _line(text: str, start: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.lstrip().startswith(start))


def test_the_peak_and_kinds_are_pytorchs_own_counts(tmp_path):
    (tmp_path / "mlp_adam.py").write_text(MLP_ADAM)
    counted = run_plain(tmp_path, "mlp_adam.py", env={"OWN_PROFILER": "1"})
    assert counted.returncode == 0, counted.stderr[-3000:]
    held = last_json(counted.stdout)
    result = profile(tmp_path, "-f", "json", "mlp_adam.py")
    assert result.returncode == 0, result.stderr[-3000:]
    report = printed_report(result.stderr)
    assert report["metadata"]["framework"] == "torch"
    (device,) = report["devices"]
    # Every allocation PyTorch's profiler sees, and no more: its own peak.
    assert device["peak"]["bytes"] == held["profiler_peak"]
    kinds = {k["kind"]: k for k in device["kinds"]}
    assert kinds["parameters"]["bytes"] == held["parameters"]
    assert kinds["gradients"]["bytes"] == held["parameters"]  # each .grad, at the peak
    assert kinds["optimizer_state"]["bytes"] == held["optimizer_state"]  # Adam's moments, steps
    assert kinds["inputs"]["bytes"] == held["input"]  # what the model was called with
    for kind in ("parameters", "gradients", "optimizer_state", "inputs"):
        assert kinds[kind]["how"] == ["the framework's own objects"]
    assert sum(k["bytes"] for k in device["kinds"]) == device["peak"]["bytes"]
    # No pool, no fragmentation model: the CPU allocator is the C library's.
    assert report["metadata"]["memory_settings"]["allocator_model"] == "none: no pool recorded"
    # The activations are at the user's lines: the forward pass and backward.
    analysis = analyze(load(tmp_path / "mlp_adam.tpumem"))
    (recorded,) = analysis.devices
    lines = {g.source for g in recorded.peak.groups if g.region == "output"}
    assert f"mlp_adam.py:{_line(MLP_ADAM, 'loss = ')}" in lines
    assert recorded.peak.step is not None  # the optimizer's steps are the steps


def test_a_script_with_its_own_profiler_runs_as_it_does_alone(tmp_path):
    """One profiler runs at a time in a process: the script's stops tpumem's for
    as long as it runs, and its results are the script's as without tpumem."""
    (tmp_path / "mlp_adam.py").write_text(MLP_ADAM)
    plain = run_plain(tmp_path, "mlp_adam.py", env={"OWN_PROFILER": "1"})
    result = profile(tmp_path, "-q", "mlp_adam.py", env={"OWN_PROFILER": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == plain.stdout
    trace = load(tmp_path / "mlp_adam.tpumem")
    marks = trace.texts_at(np.flatnonzero(trace.is_kind(MARK)))
    assert marks[:1] == [CAPTURE_GAP] and CAPTURE_RESUMED in marks


def test_a_script_that_imports_torch_xla_after_torch_is_recorded_as_pytorch_xla(tmp_path):
    script = (
        "import torch\n"
        "x = torch.ones(1024)\n"
        "import torch_xla\n"
        "y = torch.ones(256, 256, device=torch_xla.device()) * 2\n"
        "torch_xla.sync()\n"
        "print(float(y.sum()))\n"
    )
    (tmp_path / "both.py").write_text(script)
    result = profile(tmp_path, "-f", "json", "both.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "131072.0"
    report = printed_report(result.stderr)
    assert report["metadata"]["framework"] == "torch_xla"
    assert not any("also used" in w for w in report["metadata"]["warnings"])
    (device,) = report["devices"]
    assert device["peak"]["bytes"] >= 256 * 256 * 4


def test_the_process_ends_with_the_scripts_status_and_output(tmp_path):
    """Kineto's thread crashed about one run in six at exit, after the script
    ended (adapters/torch/exit_guard.py): sixteen runs (all sixteen passing by
    chance with the crash: 5.4%), each with the script's own status and its
    C-level output flushed."""
    script = (
        "import ctypes, sys\nimport torch\n"
        "model = torch.nn.Linear(64, 64)\n"
        "for _ in range(50):\n    model(torch.randn(32, 64)).sum().backward()\n"
        "ctypes.CDLL(None).printf(b'from C\\n')\n"
        "print('from Python')\nsys.exit(int(sys.argv[1]))\n"
    )
    (tmp_path / "ends.py").write_text(script)
    for run in range(16):
        result = profile(tmp_path, "-q", "--force", "ends.py", str(run % 3))
        assert result.returncode == run % 3, result.stderr[-2000:]
        assert sorted(result.stdout.splitlines()) == ["from C", "from Python"]


# What public PyTorch loops do that the MLP above does not: DataLoader workers
# forked from the recorded process (kept across epochs), an optimizer whose step
# takes a closure (LBFGS, as Lightning calls every optimizer), a loss module,
# and a model compiled by torch.compile (Dynamo, its eager backend: no C++
# compiler needed), whole-graph.
PUBLIC_SHAPES = """
import json
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
data = TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,)))
loader = DataLoader(data, batch_size=32, num_workers=2, persistent_workers=True)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
loss_fn = torch.nn.CrossEntropyLoss()
optimizer = torch.optim.LBFGS(model.parameters(), max_iter=2)
compiled = torch.compile(model, backend="eager", fullgraph=True)
steps = 0
for epoch in range(2):
    for x, y in loader:
        def closure():
            optimizer.zero_grad()
            loss = loss_fn(compiled(x), y)
            loss.backward()
            return loss
        loss = optimizer.step(closure)
        steps += 1
parameters = sum(p.untyped_storage().nbytes() for p in model.parameters())
print(json.dumps({"loss": round(float(loss), 3), "steps": steps, "parameters": parameters}))
"""


def test_workers_a_closure_a_loss_module_and_a_compiled_model(tmp_path):
    (tmp_path / "public.py").write_text(PUBLIC_SHAPES)
    plain = run_plain(tmp_path, "public.py")
    assert plain.returncode == 0, plain.stderr[-3000:]
    result = profile(tmp_path, "-f", "json", "public.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == plain.stdout
    said = last_json(result.stdout)
    report = printed_report(result.stderr)
    assert report["metadata"]["warnings"] == []  # no hook failed, nothing on other threads
    trace = load(tmp_path / "public.tpumem")
    marks = trace.texts_at(np.flatnonzero(trace.is_kind(MARK)))
    assert marks.count("optimizer step") == said["steps"]  # a closure's steps count too
    (device,) = report["devices"]
    kinds = {k["kind"]: k["bytes"] for k in device["kinds"]}
    assert kinds["parameters"] == said["parameters"]
    # The loss module's arguments are the model's outputs, not inputs: only the
    # batch the model was called with is.
    assert kinds.get("inputs", 0) <= 32 * 32 * 4
