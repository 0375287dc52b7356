"""`tpumem fit SCRIPT --tpu SLICE`: a JAX script compiled for a TPU slice by
XLA:TPU (libtpu on this machine), never run. Its figures per chip are those of an
independent ahead-of-time compile of the same functions and shardings with JAX's
own API; its verdict flips where XLA:TPU's compile does; code that lowers per
platform is compiled in its TPU form."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tpu_aot import ARRAY_SIZES, MEMORY, PRINT_MEMORY, aot_env, entry_parameters

from conftest import assert_one_line_error, run_python, run_tpumem
from profiling import InATerminal, profile
from tpumem.analysis import analyze
from tpumem.analysis.changes import SEARCH
from tpumem.trace.reader import load
from tpumem.units import format_bytes

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"
TINY = ["--width", "64", "--layers", "1", "--seq", "16", "--vocab", "128", "--batch", "4"]

# An FSDP train step as a training script writes it: a mesh over jax.devices(),
# the state made by a jitted init, the step jitted with its shardings and donated
# state, a loop, and the loss read at the end. `aot SLICE DIMS`: the same step
# compiled with JAX's own AOT API for the slice's devices, its figures printed.
# FSDP_SIZE=WIDTH,LAYERS: another size.
FSDP = (
    PRINT_MEMORY
    + """
import json, os, sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

WIDTH, LAYERS = (int(n) for n in os.environ.get("FSDP_SIZE", "2048,4").split(","))
BATCH = 64
aot = sys.argv[1:2] == ["aot"]
if aot:
    from jax.experimental import topologies
    slices = {"num_slices": int(sys.argv[4])} if len(sys.argv) > 4 else {}
    devices = topologies.get_topology_desc(
        platform="tpu",
        topology_name=sys.argv[2],
        chips_per_host_bounds=json.loads(sys.argv[3]),
        **slices,
    ).devices
else:
    devices = jax.devices()
mesh = Mesh(np.array(devices), ("fsdp",))
weights = [NamedSharding(mesh, P("fsdp", None))] * LAYERS
batch = NamedSharding(mesh, P("fsdp", None))

def init(key):
    keys = jax.random.split(key, LAYERS)
    return [jax.random.normal(k, (WIDTH, WIDTH), jnp.float32) * 0.02 for k in keys]

def loss_fn(params, x):
    for w in params:
        x = jnp.tanh(x @ w)
    return (x ** 2).mean()

def step(params, x):
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    return [w - 0.01 * g for w, g in zip(params, grads)], loss

train_step = jax.jit(
    step,
    in_shardings=(weights, batch),
    out_shardings=(weights, NamedSharding(mesh, P())),
    donate_argnums=(0,),
)
if aot:
    specs = [jax.ShapeDtypeStruct((WIDTH, WIDTH), jnp.float32, sharding=s) for s in weights]
    x = jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32, sharding=batch)
    print_memory(train_step.lower(specs, x).compile())
    raise SystemExit
params = jax.jit(init, out_shardings=weights)(jax.random.key(0))
x = jax.device_put(np.ones((BATCH, WIDTH), np.float32), batch)
for _ in range(3):
    params, loss = train_step(params, x)
print("loss", float(loss))
"""
)

# An MLP step of N f32[8192,8192] layers called as a script calls it (no AOT
# API): 31 layers fit one v5e chip, 32 do not (test_tpu_verdict_real.py checks
# the same against XLA:TPU's AOT outcome).
# A layer stack and its SGD step, for the scripts below (each imports jax and
# jax.numpy as jnp first).
TANH_MLP = """
def loss(params, x):
    for w in params:
        x = jnp.tanh(x @ w)
    return (x ** 2).mean()

def step(params, x, lr):
    grads = jax.grad(loss)(params, x)
    return [w - lr * g for w, g in zip(params, grads)]
"""

MLP = (
    """
import argparse, functools
import jax, jax.numpy as jnp

parser = argparse.ArgumentParser()
parser.add_argument("--layers", type=int, default=31)
layers = parser.parse_args().layers
"""
    + TANH_MLP
    + """
# Named by the function the partial holds (JAX's jit_step), as Flax and optax
# code wraps its steps.
train = jax.jit(functools.partial(step, lr=0.01))
params = jax.jit(lambda: [jnp.zeros((8192, 8192), jnp.float32) for _ in range(layers)])()
for _ in range(2):
    params = train(params, jnp.ones((128, 8192), jnp.float32))
print("stepped")
"""
)

# Attention that lowers per platform: on a CPU a [4096, 4096] score matrix per
# head; on a TPU (as Pallas kernels do) a blockwise form without it.
PLATFORM_DEPENDENT = """
import jax, jax.numpy as jnp
from jax import lax

def attention(q, k):
    def materialized():
        return jax.nn.softmax(q @ k.T, axis=-1) @ k
    def blockwise():
        return lax.map(lambda block: jax.nn.softmax(block @ k.T, axis=-1) @ k,
                       q.reshape(32, 128, q.shape[-1])).reshape(q.shape)
    return lax.platform_dependent(cpu=materialized, tpu=blockwise)

f = jax.jit(jax.vmap(attention))
out = f(jnp.ones((16, 4096, 128), jnp.float32), jnp.ones((16, 4096, 128), jnp.float32))
"""


# A jitted function inside another program (and under jax.grad), a new Python
# scalar each step, and a step counter that starts as a Python int and goes on
# as the step's weakly typed output (as a TrainState's): JAX compiles the step
# once; so must fit. The script then fails on its own.
NESTED = """
import jax, jax.numpy as jnp

@jax.jit
def layer(w, x):
    return jnp.tanh(x @ w)

@jax.jit
def step(w, x, lr, count):
    return w - lr * jax.grad(lambda w: layer(w, x).sum())(w), count + 1

w, x, count = jnp.zeros((512, 512)), jnp.ones((64, 512)), 0
for i in range(5):
    w, count = step(w, x, 0.1 / (i + 1), count)
print("stepped")
raise ValueError("the script's own error")
"""


def _fit(
    tmp_path: Path, script: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    (tmp_path / "script.py").write_text(script)
    return subprocess.run(
        [sys.executable, "-m", "tpumem", "fit", "--width", "200", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        timeout=600,
    )


def test_an_fsdp_step_on_two_slices_equals_jaxs_own_aot_compiles(tmp_path):
    result = _fit(tmp_path, FSDP, "--tpu", "v5e-8", "--tpu", "v5p:2x2x2", "script.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "FITS on v5e:2x4" in result.stdout and "FITS on v5p:2x2x2" in result.stdout
    # The script read its loss: where it stopped is said, and nothing ran.
    assert "the script stopped at script.py:" in result.stdout
    assert "float(loss)" in result.stdout and "loss " not in result.stdout.split("warning")[0]
    analysis = analyze(load(tmp_path / "script.fit.tpumem"))
    for target, dims in ((("v5e:2x4"), [2, 4, 1]), ("v5p:2x2x2", [2, 2, 2])):
        (compiled,) = [t for t in analysis.tpu if t.topology == target]
        steps = [p for p in compiled.programs if p.name == "jit_step"]
        assert len(steps) == 1, [p.name for p in compiled.programs]  # compiled once
        assert steps[0].compile.partitions == 8
        independent = run_python(
            FSDP, tmp_path, env=aot_env(), args=["aot", target, json.dumps(dims)]
        )
        assert {k: steps[0].memory(k) for k in MEMORY} == independent
        assert independent["alias_bytes"] > 0  # the donated state
        assert compiled.budget is not None and compiled.fit is not None and compiled.fit.fits
    # check gates on the trace fit wrote.
    checked = run_tpumem("check", str(tmp_path / "script.fit.tpumem"), "--tpu", "v5e-8")
    assert checked.returncode == 0, checked.stderr


def test_two_slices_of_a_multislice_job_equal_jaxs_own_aot_compile(tmp_path):
    result = _fit(tmp_path, FSDP, "--tpu", "v5e-8", "--slices", "2", "script.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "FITS on v5e:2x4 x2" in result.stdout
    (target,) = analyze(load(tmp_path / "script.fit.tpumem")).tpu
    (step,) = [p for p in target.programs if p.name == "jit_step"]
    assert step.compile.partitions == 16  # the FSDP axis over both slices' chips
    independent = run_python(
        FSDP, tmp_path, env=aot_env(), args=["aot", "v5e:2x4", "[2, 4, 1]", "2"]
    )
    assert {k: step.memory(k) for k in MEMORY} == independent


def test_the_verdict_flips_where_xla_tpu_refuses_and_fit_fails_then(tmp_path):
    fits = _fit(tmp_path, MLP, "-o", "31.tpumem", "--tpu", "v5e-1", "script.py", "--layers", "31")
    assert fits.returncode == 0, fits.stderr[-3000:]
    assert "FITS on v5e:1x1" in fits.stdout and "stepped" in fits.stdout
    refused = _fit(tmp_path, MLP, "-o", "32.tpumem", "--tpu", "v5e-1", "script.py", "--layers=32")
    assert refused.returncode == 1, refused.stderr[-3000:]
    assert "DOES NOT FIT on v5e:1x1: XLA:TPU refused jit_step" in refused.stdout
    assert "RESOURCE_EXHAUSTED" in refused.stdout  # XLA:TPU's own words, kept
    assert "\\x0a" not in refused.stdout  # (its lines as lines)
    # The script went on past the refusal with the shapes the step would have made,
    # and its second step is the same compile: refused once.
    assert "stepped" in refused.stdout
    (target,) = analyze(load(tmp_path / "32.tpumem")).tpu
    assert len(target.refused) == 1 and not target.programs[1:]
    assert target.refused[0].diagnostic == "v5p:1x1x1" and "what fills it" in refused.stdout


def test_a_refused_sharded_step_is_shown_as_larger_chips_would_hold_it(tmp_path):
    """40 f32[32768,32768] layers over 8 chips: 20 GiB of state a chip, which no
    v5e chip holds; what fills a chip is the plan for as many v5p chips, whose
    state per chip is JAX's own AOT compile's there."""
    size = {"FSDP_SIZE": "32768,40"}
    result = _fit(tmp_path, FSDP, "--tpu", "v5e-8", "script.py", env=size)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "DOES NOT FIT on v5e:2x4: XLA:TPU refused" in result.stdout
    assert "as XLA:TPU plans it for v5p:2x2x2" in result.stdout
    (target,) = analyze(load(tmp_path / "script.fit.tpumem")).tpu
    (step,) = [r for r in target.refused if r.name == "jit_step"]
    assert step.diagnostic == "v5p:2x2x2" and step.heap is not None
    independent = run_python(
        FSDP, tmp_path, env={**aot_env(), **size}, args=["aot", "v5p:2x2x2", "[2, 2, 2]"]
    )
    assert step.heap.parameter_bytes == independent["argument_bytes"]
    assert step.heap.output_bytes == independent["output_bytes"]
    assert {r.compile.partitions for r in target.refused} == {8}  # the init's too


def test_a_sweep_gives_the_largest_value_that_fits(tmp_path):
    result = _fit(tmp_path, MLP, "--tpu", "v5e-1", "--sweep", "layers=30,32,31", "script.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "v5e:1x1: the largest --layers that fits is 31" in result.stdout
    rows = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if "│" in line}
    assert "fits: " in rows["30"] and "fits: " in rows["31"]
    assert "does not fit: refused" in rows["32"]
    for value in ("30", "31", "32"):  # a trace each, for report and check
        analysis = analyze(load(tmp_path / f"script.fit-layers-{value}.tpumem"))
        assert analysis.tpu[0].fit is not None
        assert analysis.metadata.command[-2:] == ("--layers", value)
    # Two variants side by side: the answers per chip, and no run figures of runs
    # that never ran.
    both = run_tpumem(
        "compare", "script.fit-layers-31.tpumem", "script.fit-layers-32.tpumem", cwd=tmp_path
    )
    assert both.returncode == 0, both.stderr
    assert "Would it fit? Each TPU slice, per chip" in both.stdout
    assert "Peak in use" not in both.stdout and "does not fit" in both.stdout
    bad = run_tpumem("fit", "--tpu", "v5e-1", "--sweep", "layers", "script.py", cwd=tmp_path)
    assert bad.returncode == 2 and "NAME=V1,V2" in bad.stderr


# A step with and without rematerialization, of shapes no TPU tile divides
# (padded on the chip). `aot TOPOLOGY`: JAX's own AOT compile for one chip of it.
REMAT = (
    PRINT_MEMORY
    + """
import json, sys
import jax, jax.numpy as jnp

WIDTH, LAYERS, BATCH = 1000, 6, 512

def layer(w, x):
    return jax.nn.gelu(x @ w) * x

if "--remat" in sys.argv:
    layer = jax.checkpoint(layer)

def loss(params, x):
    for w in params:
        x = layer(w, x)
    return (x ** 2).mean()

step = jax.jit(jax.grad(loss))
if sys.argv[1:2] == ["aot"]:
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding
    chip = topologies.get_topology_desc(
        platform="tpu", topology_name=sys.argv[2], chips_per_host_bounds=[1, 1, 1]
    ).devices[0]
    on = SingleDeviceSharding(chip)
    params = [jax.ShapeDtypeStruct((WIDTH, WIDTH), jnp.float32, sharding=on)] * LAYERS
    x = jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32, sharding=on)
    print_memory(step.lower(params, x).compile())
    raise SystemExit
params = [jnp.zeros((WIDTH, WIDTH), jnp.float32)] * LAYERS
grads = step(params, jnp.ones((BATCH, WIDTH), jnp.float32))
"""
)


def test_a_remat_variant_beside_the_plain_one_equals_jaxs_own_aot_compiles(tmp_path):
    """Per chip on v6e, padded shapes, with and without jax.checkpoint: each
    figure is JAX's own AOT compile's, and compare shows each variant's need
    side by side (what remat buys; at this size XLA:TPU keeps the activations in
    the gradients' buffers either way, at 6 x 3000 rows remat saves 48 MiB of
    temporaries, but XLA:TPU takes 40 s to compile that)."""
    traces = {}
    for variant in ("plain", "remat"):
        flags = ["--remat"] if variant == "remat" else []
        trace = f"{variant}.tpumem"
        result = _fit(tmp_path, REMAT, "-o", trace, "--tpu", "v6e-1", "script.py", *flags)
        assert result.returncode == 0, result.stderr[-3000:]
        for target in analyze(load(tmp_path / trace)).tpu:
            (step,) = [p for p in target.programs if p.name == "jit_loss"]
            aot = ["aot", target.topology, *flags]
            independent = run_python(REMAT, tmp_path, env=aot_env(), args=aot)
            assert {k: step.memory(k) for k in MEMORY} == independent, (variant, target.topology)
            assert step.padding_bytes > 0  # 1000 is no multiple of the tiles
            traces[variant, target.topology] = step
    both = run_tpumem("compare", "plain.tpumem", "remat.tpumem", "--width", "200", cwd=tmp_path)
    assert both.returncode == 0, both.stderr
    # Side by side, what remat buys a chip: each variant's need on each slice.
    assert "jax (plain)" in both.stdout and "jax (remat)" in both.stdout
    for step in traces.values():
        assert f"({format_bytes(step.need_bytes, 2)} of " in both.stdout


def test_a_jit_inside_a_program_and_a_new_scalar_each_step_compile_once(tmp_path):
    result = _fit(tmp_path, NESTED, "--tpu", "v5e-1", "script.py")
    assert "stepped" in result.stdout
    (target,) = analyze(load(tmp_path / "script.fit.tpumem")).tpu
    assert [p.name for p in target.programs] == ["jit_step"]
    # The script failed after: said, with its own traceback, and the answer is
    # not a plain "fits" (exit status 1).
    assert result.returncode == 1, result.stderr[-3000:]
    assert "ValueError: the script's own error" in result.stderr
    assert "did not get through on v5e:1x1" in result.stderr
    assert "the script failed at script.py:16: raise ValueError" in result.stdout


def test_an_eager_operation_under_set_mesh_says_what_to_change(tmp_path):
    script = (
        "import jax, numpy as np\n"
        "mesh = jax.sharding.Mesh(np.array(jax.devices()), ('fsdp',))\n"
        "with jax.set_mesh(mesh):\n"
        "    key = jax.random.key(0)\n"
    )
    result = _fit(tmp_path, script, "--tpu", "v5e-4", "script.py")
    assert result.returncode == 1, result.stderr[-3000:]
    said = " ".join(result.stdout.split())  # (the report wraps its lines)
    assert "the script failed at script.py:4" in said
    assert "under jax.set_mesh, JAX runs eager operations on the mesh" in said


def test_code_that_lowers_per_platform_is_compiled_in_its_tpu_form(tmp_path):
    result = _fit(tmp_path, PLATFORM_DEPENDENT, "--tpu", "v5e-1", "script.py")
    assert result.returncode == 0, result.stderr[-3000:]
    (target,) = analyze(load(tmp_path / "script.fit.tpumem")).tpu
    (program,) = target.programs
    # The CPU form holds 16 x 4096 x 4096 f32 scores (1 GiB) at once; the TPU
    # form one block of them at a time.
    assert program.temp_bytes < 256 << 20, program.temp_bytes


def test_tensorflow_goes_the_hlo_route_with_figures_of_independent_compiles(tmp_path):
    """TensorFlow cannot lower for devices it does not have: fit runs the script
    here (profile --tpu) and compiles its programs for the slice, says so, and the
    step's arguments on the chip are its parameters at the sizes independent
    identity compiles give their shapes."""
    script = EXAMPLES / "tf_transformer.py"
    args = [*TINY, "--steps", "2", "--jit-compile"]
    result = _fit(tmp_path, "", "-o", "tf.tpumem", "--tpu", "v5e-1", str(script), *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "(TensorFlow cannot compile for devices it does not have)" in result.stderr
    assert "FITS on v5e:1x1" in result.stdout and "fit ran the script" in result.stdout
    (target,) = analyze(load(tmp_path / "tf.tpumem")).tpu
    (step,) = [p for p in target.programs if p.name.startswith("a_inference_train_step_")]
    shapes = entry_parameters(tmp_path / "tf.tpumem", step.name)
    env = {**aot_env(), "JAX_ENABLE_X64": "1"}
    sizes = run_python(ARRAY_SIZES, tmp_path, env=env, args=[json.dumps(shapes)])
    assert step.memory("argument_bytes") == sum(sizes) and step.memory("alias_bytes") > 0


# A PyTorch/XLA FSDP-style step under SPMD: its mesh over every device it has.
TORCH_XLA_SPMD = """
import numpy as np, torch
import torch_xla, torch_xla.runtime as xr
import torch_xla.distributed.spmd as xs

xr.use_spmd()
count = xr.global_runtime_device_count()
mesh = xs.Mesh(np.arange(count), (count, 1), ("fsdp", "model"))
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256))
model = model.to(torch_xla.device())
for p in model.parameters():
    xs.mark_sharding(p, mesh, ("fsdp",) + (None,) * (p.dim() - 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.ones(64, 256).to(torch_xla.device())
for _ in range(2):
    model(x).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    torch_xla.sync()
print("devices", count)
"""


def test_pytorch_xla_goes_the_hlo_route_on_as_many_devices_as_the_slice_has(tmp_path):
    result = _fit(tmp_path, TORCH_XLA_SPMD, "--tpu", "v5e-4", "script.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "devices 4" in result.stdout and "FITS on v5e:2x2" in result.stdout
    trace = load(tmp_path / "script.fit.tpumem")
    assert trace.metadata.set_by_tpumem["CPU_NUM_DEVICES"] == "4"  # and the report says so
    (target,) = analyze(trace).tpu
    assert target.programs and {p.compile.partitions for p in target.programs} == {4}
    # Each chip holds a quarter of each weight and bias, beside the whole input
    # (64 x 256 f32, not sharded) and a few scalars.
    weights = 2 * 256 * 1024 * 4 + (1024 + 256) * 4
    step = max(target.programs, key=lambda p: p.memory("argument_bytes"))
    assert weights // 4 <= step.memory("argument_bytes") <= weights // 4 + 64 * 256 * 4 + 4096


def test_a_script_that_never_imports_jax_is_one_line(tmp_path):
    (tmp_path / "plain.py").write_text("print('no framework')\n")
    result = run_tpumem("fit", "-q", "--tpu", "v5e-8", str(tmp_path / "plain.py"), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("tpumem: error: ") and "never imported JAX" in last
    assert not list(tmp_path.glob("*.tpumem"))
    missing = run_tpumem("fit", "--tpu", "v5e-8", str(tmp_path / "missing.py"), cwd=tmp_path)
    assert_one_line_error(missing, "no such file")
    no_slice = run_tpumem("fit", str(tmp_path / "plain.py"), cwd=tmp_path)
    assert_one_line_error(no_slice, "--tpu")


def test_profile_tpu_names_the_code_it_compiled_in_the_cpus_form(tmp_path):
    """`profile --tpu` compiles the CPU run's lowering: a platform_dependent
    branch the CPU chose and the CPU's LAPACK kernels are named, with their lines;
    fit, which lowers for the slice, has none to name."""
    script = PLATFORM_DEPENDENT.replace("(16, 4096, 128)", "(2, 4096, 128)")
    script += "inverse = jax.jit(jnp.linalg.inv)(jnp.eye(64) * 2.0)\n"
    (tmp_path / "script.py").write_text(script)
    result = profile(tmp_path, "-q", "--tpu", "v5e-1", "-o", "run.tpumem", "script.py")
    assert result.returncode == 0, result.stderr[-3000:]
    (target,) = analyze(load(tmp_path / "run.tpumem")).tpu
    forms = {(f.program, f.what.split(" (")[0]): f.sources for f in target.cpu_forms}
    branch = forms[("jit_attention", "a branch chosen for the CPU as it was lowered")]
    line = 1 + script.splitlines().index("    def materialized():")  # its body's line
    assert [s.rsplit(":", 1)[1] for s in branch] == [str(line + 1)]
    assert ("jit_inv", "custom call lapack_sgetrf_ffi") in forms
    report = run_tpumem("report", str(tmp_path / "run.tpumem"), "--full", "--width", "300")
    assert "jit_attention: lowered for the CPU and compiled for v5e:1x1 as it is" in report.stdout
    fitted = _fit(tmp_path, script, "--tpu", "v5e-1", "script.py")
    assert fitted.returncode == 0, fitted.stderr[-3000:]
    (compiled,) = analyze(load(tmp_path / "script.fit.tpumem")).tpu
    assert compiled.cpu_forms == () and "lowered for the CPU" not in fitted.stdout


# One program compiled, then a wait that a signal ends: the compiling process
# writes its pid once the program is compiled.
COMPILES_THEN_WAITS = """
import os, time
import jax, jax.numpy as jnp
f = jax.jit(lambda a: (a @ a.T).sum(axis=0))
out = f(jnp.ones((1024, 1024), jnp.float32))
with open("compiled.part", "w") as done:
    done.write(str(os.getpid()))
os.rename("compiled.part", "compiled")
time.sleep(300)
"""


def _fit_running(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, int]:
    """`tpumem fit ARGS script.py` running, once its program is compiled; and the
    compiling process's pid. Stopping signals as a shell gives them."""
    (tmp_path / "script.py").write_text(COMPILES_THEN_WAITS)

    def default_signals() -> None:
        for number in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            signal.signal(number, signal.SIG_DFL)

    run = subprocess.Popen(
        [sys.executable, "-m", "tpumem", "fit", "--width", "200", *args, "script.py"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        preexec_fn=default_signals,
    )
    deadline = time.monotonic() + 300
    while not (tmp_path / "compiled").exists():
        assert run.poll() is None, run.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "the program was never compiled"
        time.sleep(0.1)
    return run, int((tmp_path / "compiled").read_text())


def _ended(pid: int, within_s: float = 30) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
                return True
        except FileNotFoundError:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_fit_stopped_by_a_signal_reports_what_it_compiled_and_stops_compiling(tmp_path, how):
    """The compiling process ends with tpumem (it ran on, under PID 1), the report
    has the program compiled before, one line says how fit was stopped (no stack
    dump from libtpu), and the status is a shell's for the signal (Ctrl-C was 2)."""
    run, compiling = _fit_running(tmp_path, "--tpu", "v5e-8")
    try:
        run.send_signal(how)
        stdout, stderr = run.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):  # (on the code before: ran on)
            os.kill(compiling, signal.SIGKILL)
    assert run.returncode == 128 + how, stderr[-3000:]
    assert _ended(compiling)
    assert "1 program compiled by XLA:TPU" in " ".join(stdout.split())
    assert "Traceback" not in stderr and "***" not in stderr, stderr[-3000:]  # (absl's dump)
    said = "interrupted (SIGINT)" if how == signal.SIGINT else f"stopped by {how.name}"
    assert stderr.strip().splitlines()[-1] == (
        f"tpumem: fit {said} while compiling for v5e:2x4: the answer covers only the "
        "programs compiled before (in script.fit.tpumem)"
    )
    trace = load(tmp_path / "script.fit.tpumem")
    assert any(f"stopped ({how.name})" in warning for warning in trace.metadata.warnings)


def test_a_fit_killed_leaves_no_compile_running(tmp_path):
    run, compiling = _fit_running(tmp_path, "--tpu", "v5e-8")
    try:
        run.kill()
        run.communicate(timeout=60)
        assert _ended(compiling)  # (Linux's parent-death signal: SIGKILL)
    finally:
        with contextlib.suppress(ProcessLookupError):  # (on the code before: ran on)
            os.kill(compiling, signal.SIGKILL)


def test_fit_of_a_module_that_is_not_there_is_one_line(tmp_path):
    missing = run_tpumem("fit", "--tpu", "v5e-8", "-m", "missing_module", cwd=tmp_path)
    assert_one_line_error(missing, "no module named 'missing_module'")


def test_ctrl_c_in_the_terminal_stops_fit_once_and_reports(tmp_path):
    """The terminal's Ctrl-C reaches tpumem alone (the compile runs in a session
    of its own): 130, the report of what was compiled, no stack dump."""
    (tmp_path / "script.py").write_text(COMPILES_THEN_WAITS)
    terminal = InATerminal(tmp_path, "fit", "--width", "200", "--tpu", "v5e-8", "script.py")
    compiling, ended = None, False
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "compiled").exists():
            assert terminal.process.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        compiling = int((tmp_path / "compiled").read_text())
        terminal.press(b"\x03")  # Ctrl-C
    finally:
        output = terminal.finish(120)
        if compiling is not None:
            ended = _ended(compiling)
            with contextlib.suppress(ProcessLookupError):  # (on the code before: ran on)
                os.kill(compiling, signal.SIGKILL)
    assert ended
    assert terminal.process.returncode == 130, output[-3000:]
    assert "1 program compiled by XLA:TPU" in " ".join(output.split())
    assert "Traceback" not in output and "***" not in output, output[-3000:]
    assert "tpumem: fit interrupted (SIGINT) while compiling for v5e:2x4" in output
    # Meanwhile, the compile's seconds turned on the terminal (nothing else moves).
    assert re.search(r"compiling for v5e:2x4 with XLA:TPU: \d+ s", output), output[-3000:]


# An optax step whose arrays have no telling names: what they are is in optax's
# state objects (and its moments mirror the parameters' tree).
OPTAX = """
import jax, jax.numpy as jnp, optax
weights = {"a": jnp.zeros((512, 1024)), "c": jnp.zeros((1024,))}
opt = optax.adam(1e-3)
carried = opt.init(weights)

@jax.jit
def step(weights, carried, x):
    loss, grads = jax.value_and_grad(lambda w: jnp.tanh(x @ w["a"] + w["c"]).sum())(weights)
    updates, carried = opt.update(grads, carried, weights)
    return optax.apply_updates(weights, updates), carried, loss

x = jnp.ones((64, 512))
for _ in range(3):
    weights, carried, loss = step(weights, carried, x)
print("compiled")
"""


def test_a_chip_by_kind_takes_each_argument_s_kind_from_the_script_s_objects(tmp_path):
    result = _fit(tmp_path, OPTAX, "--tpu", "v5e-1", "script.py")
    assert result.returncode == 0, result.stderr[-3000:]
    (target,) = analyze(load(tmp_path / "script.fit.tpumem")).tpu
    chip = {k.kind: k.bytes for k in target.fit.kinds}
    parameters = (512 * 1024 + 1024) * 4
    assert chip["parameters"] == parameters
    assert chip["optimizer_state"] == 2 * parameters + 4  # Adam's moments and count
    assert chip["inputs"] == 64 * 512 * 4
    assert sum(chip.values()) == target.fit.need_bytes
    assert "One chip of v5e:1x1 by kind" in result.stdout


FLAGS_OF_ITS_OWN = """
import os
import re
os.environ["XLA_FLAGS"] = "--xla_cpu_enable_fast_math=false"  # (as Flax's examples do)
import jax, jax.numpy as jnp

@jax.jit
def step(w, x):
    for _ in range(4):
        x = jnp.tanh(x @ w)
    return x.sum()

print(step(jnp.ones((1024, 1024)), jnp.ones((1024, 1024))))
"""


def test_a_script_that_sets_xla_flags_keeps_its_flags_and_tpumem_s_plan(tmp_path):
    result = _fit(tmp_path, FLAGS_OF_ITS_OWN, "--tpu", "v5e-1", "script.py")
    assert result.returncode == 0, result.stderr[-3000:]
    said = " ".join(result.stdout.split())
    assert "the script set XLA_FLAGS itself (--xla_cpu_enable_fast_math=false)" in said
    (target,) = analyze(load(tmp_path / "script.fit.tpumem")).tpu
    (step,) = [p for p in target.programs if p.name == "jit_step"]
    assert step.heap is not None  # XLA:TPU's plan, from the dump the script's flags dropped
    # The same need as the script without flags of its own.
    plain = FLAGS_OF_ITS_OWN.replace('os.environ["XLA_FLAGS"]', "_unused")
    (tmp_path / "plain").mkdir()
    assert _fit(tmp_path / "plain", plain, "--tpu", "v5e-1", "script.py").returncode == 0
    (alone,) = analyze(load(tmp_path / "plain" / "script.fit.tpumem")).tpu
    assert alone.fit is not None and target.fit is not None
    assert target.fit.need_bytes == alone.fit.need_bytes


# The MLP's step donated, compiled by JAX's own AOT path for one v5e chip:
# `LAYERS DTYPE`, the parameters' count and dtype.
DONATED_MLP = (
    PRINT_MEMORY
    + """
import functools, sys
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

chip = topologies.get_topology_desc(
    platform="tpu", topology_name="v5e:1x1", chips_per_host_bounds=[1, 1, 1]
).devices[0]
where = SingleDeviceSharding(chip)
"""
    + TANH_MLP
    + """
train = jax.jit(functools.partial(step, lr=0.01), donate_argnames=("params",))
layers, dtype = int(sys.argv[1]), jnp.dtype(sys.argv[2])
params = [jax.ShapeDtypeStruct((8192, 8192), dtype, sharding=where) for _ in range(layers)]
x = jax.ShapeDtypeStruct((128, 8192), jnp.float32)
print_memory(train.lower(params, x).compile())
"""
)


@pytest.mark.parametrize(
    ("layers", "dtype", "tried"),
    [("32", "float32", 1), ("62", "bfloat16", 2)],
    ids=["donated", "donated-in-bfloat16"],
)
def test_a_refused_step_gets_the_changes_that_fit_with_xla_tpus_figure(
    tmp_path, layers, dtype, tried
):
    """The 32-layer step fits donated; the 62-layer one (15.5 GiB of f32
    parameters) is still refused donated, and fits with them in bfloat16."""
    refused = _fit(tmp_path, MLP, "--tpu", "v5e-1", "script.py", f"--layers={layers}")
    assert refused.returncode == 1, refused.stderr[-3000:]
    analysis = analyze(load(tmp_path / "script.fit.tpumem"))
    (target,) = analysis.tpu
    assert len(target.candidates) == tried  # one more change at a time, to the first that fits
    candidate = target.candidates[-1]
    assert candidate.change.startswith("donated (jax.jit(..., donate_argnames=('params',)),")
    assert ("in bfloat16" in candidate.change) == (dtype == "bfloat16")
    (search,) = [c for c in analysis.changes if c.key == SEARCH]
    assert search.names == ("params",) and search.topology == "v5e:1x1"
    assert search.before_bytes == candidate.need_bytes <= search.pool_bytes  # it fits
    assert "it fits" in " ".join(refused.stdout.split())
    # XLA:TPU's figures for the changed step equal JAX's own compile of it.
    independent = run_python(DONATED_MLP, tmp_path, env=aot_env(), args=[layers, dtype])
    assert candidate.program is not None
    assert {k: candidate.program.memory(k) for k in MEMORY} == independent
    size = 2 if dtype == "bfloat16" else 4
    assert independent["alias_bytes"] == int(layers) * 8192 * 8192 * size  # every layer donated


# The MLP step donated and sharded over v5e:2x4's eight chips as fit's search
# shards it (FSDP): each weight split along its first dimension, the batch too.
SHARDED_MLP = (
    PRINT_MEMORY
    + """
import functools, sys
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

devices = topologies.get_topology_desc(
    platform="tpu", topology_name="v5e:2x4", chips_per_host_bounds=[2, 4, 1]
).devices
split = NamedSharding(Mesh(np.array(devices), ("fsdp",)), P("fsdp", None))
"""
    + TANH_MLP
    + """
train = jax.jit(functools.partial(step, lr=0.01), donate_argnames=("params",))
params = [jax.ShapeDtypeStruct((8192, 8192), jnp.float32, sharding=split) for _ in range(62)]
x = jax.ShapeDtypeStruct((128, 8192), jnp.float32, sharding=split)
print_memory(train.lower(params, x).compile())
"""
)


def test_a_step_one_chip_cannot_hold_is_sharded_over_the_slices_chips(tmp_path):
    """On v5e-8 the script's 62 f32 layers (15.5 GiB) sit on one chip, as a plain
    script's do: donated, still refused; sharded over the eight chips, it fits,
    with the figures of JAX's own compile of that sharded step."""
    refused = _fit(tmp_path, MLP, "--tpu", "v5e-8", "script.py", "--layers=62")
    assert refused.returncode == 1, refused.stderr[-3000:]
    analysis = analyze(load(tmp_path / "script.fit.tpumem"))
    (target,) = analysis.tpu
    assert [c.program is not None for c in target.candidates] == [False, True]
    candidate = target.candidates[-1]
    assert "params sharded over the slice's 8 chips (FSDP" in candidate.change
    assert "bfloat16" not in candidate.change
    (search,) = [c for c in analysis.changes if c.key == SEARCH]
    assert search.before_bytes == candidate.need_bytes <= search.pool_bytes
    independent = run_python(SHARDED_MLP, tmp_path, env=aot_env())
    assert candidate.program is not None and candidate.compile.partitions == 8
    assert {k: candidate.program.memory(k) for k in MEMORY} == independent


# A table held beside the step, of a shape XLA:TPU pads (a minor dimension of 3).
HELD_BESIDE = """
import jax, jax.numpy as jnp

@jax.jit
def step(w, x):
    return w - 0.01 * jax.grad(lambda w: jnp.tanh(x @ w).sum())(w)

table = jax.jit(lambda: jnp.zeros((1 << 24, 3), jnp.float32))()
w = step(jnp.zeros((1024, 1024)), jnp.ones((256, 1024)))
print("stepped")
"""


def _one_step(tmp_path: Path, script: str) -> tuple[Any, Any]:
    """(the v5e-1 target, its jit_step) of a script that fits."""
    result = _fit(tmp_path, script, "--tpu", "v5e-1", "script.py")
    assert result.returncode == 0, result.stderr[-3000:]
    (target,) = analyze(load(tmp_path / "script.fit.tpumem")).tpu
    (step,) = [p for p in target.programs if p.name == "jit_step"]
    return target, step


def test_an_array_held_beside_a_step_counts_at_xla_tpus_layout(tmp_path):
    target, step = _one_step(tmp_path, HELD_BESIDE)
    env = aot_env()
    shapes = json.dumps([[[1 << 24, 3], "float32"]])
    (size,) = run_python(ARRAY_SIZES, tmp_path, env=env, args=[shapes])
    assert size == 256 << 20  # (its elements: 192 MiB)
    assert step.compile.outside_bytes == size
    assert target.fit is not None and target.fit.need_bytes == step.need_bytes + size


# The first state kept as a reference while the step runs again (cached calls).
KEEPS_THE_FIRST = """
import jax, jax.numpy as jnp

@jax.jit
def step(params, x):
    grads = jax.grad(lambda p: sum(jnp.tanh(x @ w).sum() for w in p))(params)
    return [w - 0.01 * g for w, g in zip(params, grads)]

params = jax.jit(lambda: [jnp.zeros((4096, 4096)) for _ in range(8)])()
x = jnp.ones((128, 4096))
first = params
for _ in range(3):
    params = step(params, x)
print("stepped")
"""


def test_arrays_kept_across_cached_calls_count_at_each_call(tmp_path):
    target, step = _one_step(tmp_path, KEEPS_THE_FIRST)
    # Held beside the second call, not the first (the first call's arguments).
    assert step.compile.outside_bytes == 8 * 4096 * 4096 * 4
    assert target.fit is not None
    assert target.fit.need_bytes == step.need_bytes + step.compile.outside_bytes


PJIT = """
import jax, jax.numpy as jnp
from jax.experimental.pjit import pjit
from jax.sharding import NamedSharding, PartitionSpec as P

mesh = jax.make_mesh((len(jax.devices()),), ("d",))

def step(w, x):
    return w - 0.01 * jax.grad(lambda w: jnp.tanh(x @ w).sum())(w)

columns = NamedSharding(mesh, P(None, "d"))
train = pjit(step, in_shardings=(columns, NamedSharding(mesh, P("d"))), out_shardings=columns)
w = train(jnp.zeros((1024, 1024)), jnp.ones((256, 1024)))
print("stepped")
"""

PMAP = (
    PRINT_MEMORY
    + """
import sys
import jax, jax.numpy as jnp

def loss(x):
    return jnp.tanh(x @ x.T).sum()

if sys.argv[1:] == ["aot"]:
    from jax.experimental import topologies
    chips = topologies.get_topology_desc(
        platform="tpu", topology_name="v5e:2x4", chips_per_host_bounds=[2, 4, 1]
    ).devices
    mapped = jax.pmap(loss, devices=chips)
    print_memory(mapped.lower(jax.ShapeDtypeStruct((8, 512, 512), jnp.float32)).compile())
else:
    print(jax.pmap(loss)(jnp.ones((jax.local_device_count(), 512, 512))))
"""
)


@pytest.mark.parametrize("script", [PJIT, PMAP], ids=["pjit", "pmap"])
def test_pjit_and_pmap_compile_for_the_slice(tmp_path, script):
    result = _fit(tmp_path, script, "--tpu", "v5e-8", "script.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "FITS on v5e:2x4" in result.stdout
    (target,) = analyze(load(tmp_path / "script.fit.tpumem")).tpu
    (program,) = target.programs
    assert program.compile.partitions == 8
    if script is PMAP:  # the same figures as JAX's own compile of the pmap
        independent = run_python(PMAP, tmp_path, env=aot_env(), args=["aot"])
        assert {k: program.memory(k) for k in MEMORY} == independent


# A step whose activations, not its state, overflow a chip: what fits is half
# the batch (donation kept: it costs nothing; bfloat16 left out: not needed).
# `aot`: that step, compiled by JAX's own AOT path for one v5e chip.
WIDE_BATCH = (
    PRINT_MEMORY
    + """
import functools, sys
import jax, jax.numpy as jnp
"""
    + TANH_MLP
    + """
if sys.argv[1:] == ["aot"]:
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding
    chip = topologies.get_topology_desc(
        platform="tpu", topology_name="v5e:1x1", chips_per_host_bounds=[1, 1, 1]
    ).devices[0]
    on = SingleDeviceSharding(chip)
    params = [jax.ShapeDtypeStruct((4096, 4096), jnp.float32, sharding=on)] * 6
    x = jax.ShapeDtypeStruct((131072, 4096), jnp.float32)
    train = jax.jit(functools.partial(step, lr=0.01), donate_argnames=("params",))
    print_memory(train.lower(params, x).compile())
    raise SystemExit
params = jax.jit(lambda: [jnp.zeros((4096, 4096), jnp.float32) for _ in range(6)])()
train = jax.jit(functools.partial(step, lr=0.01))
params = train(params, jnp.ones((262144, 4096), jnp.float32))
print("stepped")
"""
)


def test_a_step_whose_batch_overflows_fits_at_half_the_batch_donated(tmp_path):
    refused = _fit(tmp_path, WIDE_BATCH, "--tpu", "v5e-1", "script.py")
    assert refused.returncode == 1, refused.stderr[-3000:]
    analysis = analyze(load(tmp_path / "script.fit.tpumem"))
    (search,) = [c for c in analysis.changes if c.key == SEARCH]
    (target,) = analysis.tpu
    (chosen,) = [c for c in target.candidates if c.change == search.ops[0]]
    assert chosen.change == (
        "donated (jax.jit(..., donate_argnames=('params',)), where the script does not use "
        "them after the call); batch 131072, not 262144 (twice the steps an epoch)"
    )
    assert search.before_bytes == chosen.need_bytes <= search.pool_bytes
    independent = run_python(WIDE_BATCH, tmp_path, env=aot_env(), args=["aot"])
    assert chosen.program is not None
    assert {k: chosen.program.memory(k) for k in MEMORY} == independent


# A Pallas kernel whose one block (the whole f32[8192,8192]) is 256 MiB of
# on-chip VMEM, which a v5e chip has 128 MiB of.
VMEM_KERNEL = """
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl

def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] * 2.0

@jax.jit
def double(x):
    whole = pl.BlockSpec(x.shape, lambda i: (0, 0))
    out = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return pl.pallas_call(kernel, out_shape=out, grid=(1,), in_specs=[whole], out_specs=whole)(x)

print(double(jnp.ones((8192, 8192), jnp.float32)))
"""


def test_a_kernel_too_large_for_vmem_is_a_verdict_and_nothing_more_is_compiled(tmp_path):
    refused = _fit(tmp_path, VMEM_KERNEL, "--tpu", "v5e-1", "script.py")
    assert refused.returncode == 1, refused.stderr[-3000:]
    said = " ".join(refused.stdout.split())
    assert (
        "DOES NOT FIT on v5e:1x1: XLA:TPU refused jit_double: a kernel's blocks need "
        "256.00 MiB of the 128.00 MiB of on-chip VMEM" in said
    )
    (target,) = analyze(load(tmp_path / "script.fit.tpumem")).tpu
    # No diagnostic compile (VMEM is no larger on a larger chip), no search (what
    # shrinks HBM does not shrink a block).
    assert target.refused[0].diagnostic is None and not target.candidates


def test_a_step_nothing_shards_is_said_to_use_one_of_the_slices_chips(tmp_path):
    """HELD_BESIDE's step, unsharded, on a 4-chip slice: its figure is one chip's,
    and the verdict says the other three sit idle; on one chip it says nothing."""
    result = _fit(tmp_path, HELD_BESIDE, "--tpu", "v5e:2x2", "script.py")
    assert result.returncode == 0, result.stderr[-3000:]
    said = " ".join(result.stdout.split())
    assert "runs on 1 of the slice's 4 chips: nothing shards it" in said
    (target,) = analyze(load(tmp_path / "script.fit.tpumem")).tpu
    assert target.programs[0].compile.partitions == 1
    (tmp_path / "one").mkdir()
    one = _fit(tmp_path / "one", HELD_BESIDE, "--tpu", "v5e-1", "script.py")
    assert one.returncode == 0, one.stderr[-3000:]
    assert "FITS on v5e:1x1" in one.stdout and "of the slice's" not in one.stdout
