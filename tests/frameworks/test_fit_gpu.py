"""`tpumem fit --gpu`: a PyTorch script's steps on fake tensors, its allocations
through the caching allocator's model, against what real runs counted: the
H200 run of tests/tools/record_torch_snapshots.py (its `mlp` part) and the same
step on this CPU. Each run in processes of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import printed_report
from profiling import QUIET, profile

DATA = Path(__file__).resolve().parent.parent / "data" / "torch_cuda"

# The `mlp` part of tests/tools/record_torch_snapshots.py, on the device there
# is: 4 Linear+GELU layers of 512, Adam, a batch of 64, 20 steps. FOREACH set:
# Adam's implementation given, so that the CPU's run takes the one a GPU would.
H200_MLP = """
import os
import sys

import torch
from torch import nn

width, layers, batch, classes = 512, 4, int(os.environ.get("BATCH", "64")), 10
device = "cuda" if torch.cuda.is_available() else "cpu"
modules = []
for _ in range(layers):
    modules += [nn.Linear(width, width), nn.GELU(approximate="tanh")]
model = nn.Sequential(*modules, nn.Linear(width, classes))
with torch.no_grad():
    for p in model.parameters():
        p.normal_(0.0, 0.02) if p.dim() == 2 else p.zero_()
model = model.to(device)
foreach = {"1": True, "0": False}.get(os.environ.get("FOREACH", ""))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=foreach)
x = torch.randn(batch, width, device=device)
y = torch.randint(0, classes, [batch], device=device)
for step in range(20):
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    if not torch.isfinite(loss) or torch.isnan(loss).any():
        sys.exit("the loss is not finite")
    print(step, f"{loss.item():.3f}")
"""


def fit(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tpumem", "fit", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **QUIET, **(env or {})},
        timeout=600,
    )


def report(cwd: Path, trace: str, *args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "tpumem", "report", "-f", "json", trace, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout)


def _kinds(device: dict) -> dict[str, int]:
    return {k["kind"]: k["bytes"] for k in device["kinds"]}


def test_the_recorded_h200_runs_peaks_without_a_gpu(tmp_path):
    """PyTorch on the H200 counted max_memory_allocated 89,407,488 B and
    max_memory_reserved 92,274,688 B for this step; the fit on fake tensors, on
    this CPU, gives the same within a few blocks, and the same segments."""
    recorded = json.loads((DATA / "mlp.json").read_text())
    (tmp_path / "mlp.py").write_text(H200_MLP)
    result = fit(tmp_path, "--gpu", "H200", "-o", "mlp.fit.tpumem", "mlp.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "H200" in result.stdout and "fits:" in result.stdout
    # The script's own output: three steps, then stopped (a stand-in loss of 1).
    assert [line.split()[0] for line in result.stdout.splitlines()[:2]] == ["0", "1"]
    assert "Traceback" not in result.stderr

    from tpumem.analysis.gpus import gpu_named

    usable = gpu_named("H200").usable_bytes
    data = report(tmp_path, "mlp.fit.tpumem", "--capacity", str(usable))
    (device,) = data["devices"]
    peak = device["peak"]["bytes"]
    # (Adam's step counts, ten blocks of 512 B, are host tensors on a GPU: here not.)
    assert abs(peak - recorded["max_memory_allocated"]) <= 10 * 512, peak
    (check,) = data["capacity"]
    assert usable - check["headroom_bytes"] == recorded["max_memory_reserved"]
    kinds = _kinds(device)
    parameters = 4 * (512 * 512 + 512) * 4 + (512 * 10 + 10) * 4
    assert kinds["parameters"] == parameters
    assert kinds["optimizer_state"] >= 2 * parameters  # the moments, and the step counts
    # cuBLAS's workspaces (the script's thread's and backward's, and cuBLASLt's)
    # and the 512-byte rounding are the overhead.
    assert kinds["overhead"] >= 2 * 32 * 2**20 + 2**20
    assert sum(kinds.values()) == peak
    warnings = "\n".join(data["warnings"])
    assert "stopped the script as its optimizer's step 3 ended" in warnings
    assert "stand-ins" in warnings


def test_the_step_against_the_same_step_on_this_cpu(tmp_path):
    """The fake run's storages at its peak against the real CPU run's peak (the
    single-tensor Adam in both): within 2%, less what a GPU adds (its workspaces,
    its rounding)."""
    (tmp_path / "mlp.py").write_text(H200_MLP)
    env = {"FOREACH": "0", "BATCH": "256"}
    real = profile(tmp_path, "-f", "json", "-o", "cpu.tpumem", "mlp.py", env=env)
    assert real.returncode == 0, real.stderr[-3000:]
    (cpu,) = printed_report(real.stderr)["devices"]
    result = fit(tmp_path, "-q", "--gpu", "H100-80GB", "-o", "f.tpumem", "mlp.py", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    (device,) = report(tmp_path, "f.tpumem")["devices"]
    storages = device["peak"]["bytes"] - _kinds(device)["overhead"]
    assert abs(storages - cpu["peak"]["bytes"]) <= 0.02 * cpu["peak"]["bytes"]
    assert _kinds(device)["parameters"] == _kinds(cpu)["parameters"]


# Parameters alone past an A100 40GB's memory: 10,240 x 1,048,576 float32 = 40 GiB.
TOO_LARGE = """
import torch

layer = torch.nn.Linear(1 << 20, 10240, bias=False)
optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
x = torch.randn(8, 1 << 20)
for _ in range(3):
    layer(x).sum().backward()
    optimizer.step()
"""


def test_a_model_too_large_for_the_gpu_is_out_of_memory_where_it_asks(tmp_path):
    (tmp_path / "big.py").write_text(TOO_LARGE)
    result = fit(tmp_path, "--gpu", "A100-40GB", "--gpu", "H200", "-o", "big.tpumem", "big.py")
    assert result.returncode == 1, result.stderr[-3000:]
    table = result.stdout.split("Will it fit?")[1]
    verdicts = {line.split("│")[1].strip(): line for line in table.splitlines() if "│" in line}
    a100 = next(v for k, v in verdicts.items() if k.startswith("A100"))
    assert "out of memory" in a100 and "big.py:4" in result.stdout
    assert "fits:" in next(v for k, v in verdicts.items() if k.startswith("H200"))
    assert "Traceback" not in result.stderr


def test_a_sweep_gives_the_largest_batch_that_fits(tmp_path):
    """Each batch of 1 GiB of inputs (and its activations): a sweep stops running
    values above the first that no GPU holds."""
    (tmp_path / "batches.py").write_text(
        """
import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=1)
batch = parser.parse_args().batch
layer = torch.nn.Linear(1 << 18, 1)
optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
x = torch.randn(batch * 1024, 1 << 18)
for _ in range(2):
    layer(x).sum().backward()
    optimizer.step()
"""
    )
    result = fit(tmp_path, "--gpu", "A100-40GB", "--sweep", "batch=16,32,48,64", "batches.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "A100 40GB: the largest --batch that fits is 32" in result.stdout
    assert "not run: --batch 48 fit no GPU" in result.stdout
    for value in ("16", "32", "48"):
        assert (tmp_path / f"batches.fit-batch-{value}.tpumem").exists()
    assert not (tmp_path / "batches.fit-batch-64.tpumem").exists()


# A script written for a GPU: CUDA named outright, mixed precision, a GradScaler.
FOR_A_GPU = """
import os

import torch
from torch import nn

model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler = torch.amp.GradScaler("cuda")
amp = os.environ.get("AMP") == "1"
for step in range(10):
    x = torch.randn(2048, 1024, device="cuda")
    y = torch.randn(2048, 1024).to("cuda", non_blocking=True)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        loss = nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    print(step, loss.item())
"""


def test_a_script_written_for_a_gpu_runs_in_half_precision(tmp_path):
    """`.cuda()`, device="cuda" and torch.autocast("cuda") run on the CPU's fake
    tensors; the GradScaler finds no infinities, so the optimizer steps (and the
    fit stops after three); under autocast the activations are bfloat16."""
    (tmp_path / "amp.py").write_text(FOR_A_GPU)
    kinds = {}
    for amp in ("0", "1"):
        result = fit(
            tmp_path, "-q", "--gpu", "H100", "-o", f"{amp}.tpumem", "amp.py", env={"AMP": amp}
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert len([line for line in result.stdout.splitlines() if line[:1].isdigit()]) == 2
        data = report(tmp_path, f"{amp}.tpumem")
        assert "stopped the script as its optimizer's step 3 ended" in "\n".join(data["warnings"])
        kinds[amp] = _kinds(data["devices"][0])
    assert kinds["1"]["optimizer_state"] == kinds["0"]["optimizer_state"] > 0
    # (the first layer's output and the GELU's, half the bytes in bfloat16)
    assert kinds["1"]["activations"] < 0.75 * kinds["0"]["activations"]


def test_workers_values_and_scripts_that_are_not_pytorchs(tmp_path):
    """A DataLoader with workers and pinned memory runs in the process; a tensor's
    values asked for (.numpy()) end the fit in one line; a JAX script is refused."""
    (tmp_path / "loader.py").write_text(
        """
import torch
from torch.utils.data import DataLoader, TensorDataset

data = TensorDataset(torch.randn(512, 32), torch.randint(0, 4, (512,)))
loader = DataLoader(data, batch_size=64, num_workers=2, pin_memory=True, persistent_workers=True)
model = torch.nn.Linear(32, 4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
"""
    )
    result = fit(tmp_path, "--gpu", "H100", "loader.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "DataLoaders made their batches in the script's process" in result.stdout
    (tmp_path / "values.py").write_text("import torch\nx = torch.randn(4)\nprint(x.numpy())\n")
    result = fit(tmp_path, "--gpu", "H100", "values.py")
    assert result.returncode == 2
    said = result.stderr.strip().splitlines()[-1]
    assert said.startswith("tpumem: error: fit --gpu: the script ended with exit status 1 (")
    assert "a fake tensor has no values" in said
    # After a step, a value read ends the run as a TPU's fit ends it: the
    # steps before it answer.
    (tmp_path / "after.py").write_text(
        "import torch\nm = torch.nn.Linear(4, 4)\no = torch.optim.SGD(m.parameters())\n"
        "for _ in range(5):\n    m(torch.randn(2, 4)).sum().backward()\n    o.step()\n"
        "    print(m.weight.detach().numpy())\n"
    )
    result = fit(tmp_path, "-q", "--gpu", "H100", "after.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "the script stopped after 1 optimizer step, where it needed a tensor's values" in (
        result.stderr
    )
    assert "1 optimizer step on fake tensors" in result.stdout
    (tmp_path / "plain.py").write_text("import jax.numpy as jnp\nprint(jnp.ones(3).sum())\n")

    result = fit(tmp_path, "--gpu", "H100", "plain.py")
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("tpumem: error: fit --gpu:")
    assert "Traceback" not in result.stderr


def test_a_script_without_an_optimizer_and_with_copied_layers(tmp_path):
    """Layers copied by deepcopy (as nn.TransformerEncoder makes its own), moved
    and cast; parameters updated by the script itself: stopped after
    NO_OPTIMIZER_BACKWARDS backward passes, with the parameters' kind told."""
    (tmp_path / "manual.py").write_text(
        """
import copy

import torch

layer = torch.nn.Linear(256, 256)
model = torch.nn.Sequential(*[copy.deepcopy(layer) for _ in range(4)]).to("cuda")
model = model.to(torch.bfloat16).to(torch.float32)
x = torch.randn(32, 256, device="cuda")
for step in range(1000):
    model.zero_grad()
    model(x).pow(2).mean().backward()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-0.1)
"""
    )
    result = fit(tmp_path, "-q", "--gpu", "H200", "-o", "m.tpumem", "manual.py")
    assert result.returncode == 0, result.stderr[-3000:]
    data = report(tmp_path, "m.tpumem")
    assert "stepped no torch.optim optimizer in 64 backward passes" in "\n".join(data["warnings"])
    assert _kinds(data["devices"][0])["parameters"] == 4 * (256 * 256 + 256) * 4


# What a script asks of fake tensors, each asserted inside it: the fit ends 0
# only where every answer is the one a GPU run's would be in kind.
ASKS = """
import torch

torch.cuda.set_device(0)
assert torch.cuda.current_device() == 0 and "H100" in torch.cuda.get_device_name()
x = torch.randn(8, 16)
other = torch.empty(2, dtype=torch.float16)
for moved in (
    x.to("cuda", copy=True),
    x.to("cuda", torch.float16, False, True),
    x.to(device="cuda", dtype=torch.bfloat16),
    x.to(other),
    x.cuda(0),
    x.pin_memory(),
):
    assert moved.shape == x.shape
assert torch.tensor(True) and not torch.tensor(False) and torch.ones((), dtype=torch.bool)
loss = x.sum()
assert torch.isfinite(loss) and not torch.isnan(loss).any() and not torch.isinf(loss)
assert bool(loss == loss) and loss.item() == 1.0
attention = torch.nn.functional.scaled_dot_product_attention
q = torch.randn(2, 4, 64, 32, requires_grad=True)
mask = torch.ones(64, 64, dtype=torch.bool).tril()
for out in (
    attention(q, q, q, attn_mask=mask, dropout_p=0.1),
    attention(q.bfloat16(), q.bfloat16(), q.bfloat16(), is_causal=True),
    attention(q[0], q[0], q[0]),  # (three dimensions: as it was)
    attention(q, q[:, :2], q[:, :2], enable_gqa=True),
):
    out.sum().backward()
model = torch.nn.Linear(16, 16)
optimizer = torch.optim.Adam(model.parameters())
for step in range(10):
    model(x).sum().backward()
    optimizer.step()
    counts = {state["step"].item() for state in optimizer.state.values()}
    assert counts == {step + 1.0}, counts
    print("step", step, "counted")
"""


def test_what_a_script_asks_of_fake_tensors(tmp_path):
    (tmp_path / "asks.py").write_text(ASKS)
    result = fit(tmp_path, "-q", "--gpu", "H100", "--steps", "4", "-o", "a.tpumem", "asks.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("counted") == 3  # (the fourth step ends the run)


def test_gpus_of_two_workspaces_each_run_with_its_own(tmp_path):
    """An A100's cuBLAS workspace is not an H100's: a run each, each GPU's
    verdict from its own (the H100's overhead 2 x 24 MiB more)."""
    (tmp_path / "mlp.py").write_text(H200_MLP)
    result = fit(tmp_path, "-q", "--gpu", "A100-40GB", "--gpu", "H100", "-o", "w.tpumem", "mlp.py")
    assert result.returncode == 0, result.stderr[-3000:]
    a100 = _kinds(report(tmp_path, "w.tpumem")["devices"][0])["overhead"]
    h100 = _kinds(report(tmp_path, "w-H100-80GB.tpumem")["devices"][0])["overhead"]
    assert h100 - a100 == 2 * (32 << 20) - 2 * (4096 * 1024 * 2 + 16 * 1024 * 8)
