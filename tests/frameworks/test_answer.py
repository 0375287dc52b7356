"""The answer a report opens with, on real runs: the lines that hold the peak
(inside compiled programs too), the kinds of memory it is, and what to change,
each against a figure the framework or XProf gives on its own."""

from __future__ import annotations

import json
from pathlib import Path

from tpu_aot import aot_env

from conftest import run_tpumem
from profiling import profile
from tpumem.analysis import analyze
from tpumem.analysis.changes import BF16, DONATE, GROWTH, PADDING, REMAT
from tpumem.analysis.kinds import ACTIVATIONS, GRADIENTS, INPUTS, OPTIMIZER, PARAMETERS
from tpumem.trace.reader import load
from xprof_runner import memory_viewer

SMALL = 16 * 1024  # XProf's memory_viewer lumps buffers below this together

# A JAX step whose forward pass keeps two large values of one line for the
# backward pass (its tanh and cos, BATCH x HIDDEN floats each) and one of another
# (the product they are taken of), with Adam's two moments beside the parameters;
# `donate` gives the step its state.
JAX_STEP = """
import functools, json, sys
import jax, jax.numpy as jnp, optax

BATCH, WIDTH, HIDDEN = 256, 128, 4096
donate = (0, 1) if "--donate" in sys.argv else ()
key = jax.random.key(0)
params = {{"w1": jax.random.normal(key, (WIDTH, HIDDEN)), "w2": jnp.ones((WIDTH, WIDTH))}}
tx = optax.adam(1e-3)
state = tx.init(params)
x = jnp.ones((BATCH, WIDTH))

def loss_fn(p, x):
    h = x @ p["w1"]  # LESS
    big = jnp.tanh(h) * jnp.cos(h)  # BIG
    small = jnp.sin(x @ p["w2"])
    return jnp.mean(big) + jnp.mean(small ** 2)

@functools.partial(jax.jit, donate_argnums=donate)
def step(params, state, x):
    loss, grads = jax.value_and_grad(loss_fn)(params, x)
    updates, state = tx.update(grads, state)
    return optax.apply_updates(params, updates), state, loss

for _ in range(3):
    params, state, loss = step(params, state, x)
{leak}
print(json.dumps({{"params": sum(p.nbytes for p in jax.tree.leaves(params)), "loss": float(loss)}}))
"""
LEAK = """
kept = []
for number in range(12):
    with jax.profiler.StepTraceAnnotation("train", step_num=number):
        params, state, loss = step(params, state, x)
        kept.append(params["w1"] * 1.0)  # LEAK
        loss.block_until_ready()
"""


def _line(script: str, mark: str) -> str:
    """`script.py:N` of the line that ends with `# mark`."""
    (number,) = [n for n, text in enumerate(script.splitlines(), 1) if text.endswith(f"# {mark}")]
    return f"script.py:{number}"


def _run(tmp_path: Path, script: str, *args: str) -> tuple[Path, dict]:
    (tmp_path / "script.py").write_text(script)
    result = profile(tmp_path, "-q", "--force", "-o", "run.tpumem", "script.py", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp_path / "run.tpumem", json.loads(result.stdout.strip().splitlines()[-1])


def test_a_jax_steps_lines_come_from_inside_the_program(tmp_path):
    """The line whose value the backward pass keeps holds most of the step's
    working memory at the peak: first in the table and in the flame graph, with
    the bytes of XProf's memory_viewer for that line of the program."""
    script = JAX_STEP.format(leak="")
    trace, _ = _run(tmp_path, script)
    (device,) = analyze(load(trace)).devices
    big, less = _line(script, "BIG"), _line(script, "LESS")
    inside = [line for line in device.lines.lines if line.program]
    assert inside[0].line == big and inside[0].program == "jit_step"
    assert inside[1].line == less and inside[0].bytes > inside[1].bytes
    # XProf, reading the same program from the export, puts the same bytes there.
    exported = run_tpumem("export", "tensorboard", str(trace), "--logdir", str(tmp_path / "tb"))
    assert exported.returncode == 0, exported.stderr
    viewer = memory_viewer(tmp_path / "tb" / "plugins" / "profile" / "run")
    (step,) = [v for v in viewer.values() if v["moduleName"] == "jit_step"]
    theirs = sum(
        round(b["logicalBufferSizeMib"] * (1 << 20))
        for b in step["maxHeap"]
        if b.get("groupName", "").lower() == "temporary"
        and b.get("sourceInfo", {}).get("lineNumber") == int(big.split(":")[1])
    )
    program = next(p for p in analyze(load(trace)).compiled if p.name == "jit_step")
    ours = [b for b in program.heap.live_at_peak if b.source == big and b.group == "temporary"]
    assert theirs == sum(b.bytes for b in ours if b.bytes >= SMALL) > 0
    assert inside[0].bytes == sum(b.bytes for b in ours)
    # The flame graph: the call that ran the step, the program, then its lines.
    opened = [s for s in device.peak.stacks if "jit_step" in [f.function for f in s.frames]]
    top = opened[0]
    assert top.frames[-1].location == big and top.bytes == inside[0].bytes
    names = [frame.function for frame in top.frames]
    assert names.index("jit_step") < names.index("loss_fn") == len(names) - 1
    # The text report's first screen names the line, in 80 columns.
    text = run_tpumem("report", str(trace), "--width", "80").stdout.splitlines()
    assert any(big in line for line in text[:30]), "\n".join(text[:30])
    # (The title and the closing command hold the path whole.)
    assert max(len(line) for line in text[1:-1]) <= 80


def test_jax_kinds_and_the_donation_a_step_lacks(tmp_path):
    """Parameters and Adam's moments (and its count) by optax's objects in the
    step's pytrees; without donation the step's new state is a second copy at the
    peak, and the change says so with its exact bytes; with donation, one copy and
    no change."""
    script = JAX_STEP.format(leak="")
    trace, printed = _run(tmp_path, script)
    params = printed["params"]
    analysis = analyze(load(trace))
    (device,) = analysis.devices
    kinds = {k.kind: k.bytes for k in device.kinds.kinds}
    assert kinds[PARAMETERS] == 2 * params and kinds[OPTIMIZER] == 2 * (2 * params + 4)
    assert kinds[INPUTS] == 256 * 128 * 4
    assert sum(kinds.values()) == device.peak.bytes
    (running,) = device.programs_at_peak
    assert kinds[ACTIVATIONS] == running.temp_bytes
    (donate,) = [c for c in analysis.changes if c.key == DONATE]
    assert donate.bytes == 3 * params + 4 and donate.names == ("params", "state")
    remat = [c for c in analysis.changes if c.key == REMAT]
    assert remat and remat[0].line == _line(script, "BIG")

    trace, printed = _run(tmp_path, script, "--donate")
    analysis = analyze(load(trace))
    (device,) = analysis.devices
    kinds = {k.kind: k.bytes for k in device.kinds.kinds}
    assert kinds[PARAMETERS] == params and kinds[OPTIMIZER] == 2 * params + 4
    assert not [c for c in analysis.changes if c.key == DONATE]


def test_a_leak_is_named_at_its_line(tmp_path):
    script = JAX_STEP.format(leak=LEAK)
    trace, _ = _run(tmp_path, script, "--donate")
    analysis = analyze(load(trace))
    (growth,) = [c for c in analysis.changes if c.key == GROWTH]
    assert growth.line == _line(script, "LEAK")
    assert growth.bytes == 128 * 4096 * 4  # one w1 a step
    # The list that keeps them, filled at the same line here.
    assert growth.kept is not None and growth.kept.name == "kept"
    assert growth.kept.line == growth.line and growth.kept.arrays == 12
    said = " ".join(run_tpumem("report", str(trace), "--full", "--width", "120").stdout.split())
    assert f"{growth.line} makes arrays that stay" in said
    assert f"kept (list, filled at {growth.line}) held 12 device arrays" in said


TORCH_XLA_STEP = """
import json
import torch, torch_xla
import torch_xla.core.xla_model as xm

device = torch_xla.device()
model = torch.nn.Sequential(
    torch.nn.Linear(256, 1024), torch.nn.Tanh(), torch.nn.Linear(1024, 256)
).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.ones(64, 256, device=device)
for _ in range(3):
    optimizer.zero_grad(set_to_none=False)
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
    torch_xla.sync()
print(json.dumps({"params": sum(p.numel() * p.element_size() for p in model.parameters())}))
"""


def test_torch_xla_kinds_are_the_adapters_record(tmp_path):
    """Parameters, their gradients and Adam's two moments, each its known size."""
    trace, printed = _run(tmp_path, TORCH_XLA_STEP)
    params = printed["params"]
    analysis = analyze(load(trace))
    device = max(analysis.devices, key=lambda d: d.peak.bytes)
    kinds = {k.kind: k.bytes for k in device.kinds.kinds}
    assert kinds[PARAMETERS] == params
    assert kinds[GRADIENTS] == params
    assert kinds[OPTIMIZER] == 2 * params
    assert sum(kinds.values()) == device.peak.bytes


TF_STEP = """
import json, sys
import tensorflow as tf

BATCH, WIDTH, HIDDEN = 256, 128, 4096
w1 = tf.Variable(tf.random.normal((WIDTH, HIDDEN)))
w2 = tf.Variable(tf.ones((WIDTH, WIDTH)))
x = tf.ones((BATCH, WIDTH))

def step(x):
    with tf.GradientTape() as tape:
        h = x @ w1  # LESS
        big = tf.tanh(h) * tf.cos(h)  # BIG
        small = tf.sin(x @ w2)
        loss = tf.reduce_mean(big) + tf.reduce_mean(small ** 2)
    g1, g2 = tape.gradient(loss, [w1, w2])
    w1.assign_sub(1e-3 * g1)
    w2.assign_sub(1e-3 * g2)
    return loss

if "--jit" in sys.argv:
    step = tf.function(step, jit_compile=True)
for _ in range(3):
    loss = step(x)
print(json.dumps({"loss": float(loss)}))
"""


def test_tensorflow_lines_are_the_users_inside_a_compiled_function_and_eager(tmp_path):
    """A jit_compile step: XLA's metadata gives TensorFlow's own line for every
    op; the adapter's record of the function's ops puts them at the user's lines,
    the line whose values the tape keeps first. Run eagerly, the allocator's
    buffers (measured) put the same line first."""
    big, less = _line(TF_STEP, "BIG"), _line(TF_STEP, "LESS")
    trace, _ = _run(tmp_path, TF_STEP, "--jit")
    analysis = analyze(load(trace))
    (device,) = analysis.devices
    inside = [line for line in device.lines.lines if line.program and line.line]
    assert inside[0].line == big and "Tanh" in inside[0].ops
    assert inside[1].line == less and inside[0].bytes > inside[1].bytes
    assert not any("site-packages" in line.line for line in inside)
    remat = [c for c in analysis.changes if c.key == REMAT]
    assert remat[0].line == big
    said = run_tpumem("report", str(trace), "--full", "--width", "120").stdout
    assert "tf.recompute_grad" in said

    trace, _ = _run(tmp_path, TF_STEP)
    (device,) = analyze(load(trace)).devices
    assert device.peak_label == "measured"
    assert device.lines.lines[0].line == big and device.lines.lines[0].program is None


TPU_STEP = """
import json, sys
import jax, jax.numpy as jnp

dtype = jnp.bfloat16 if "--bf16" in sys.argv else jnp.float32
params = {"w1": jnp.ones((256, 1024), dtype), "w2": jnp.ones((16, 64, 64), dtype)}
state = {"mu": jax.tree.map(jnp.zeros_like, params), "nu": jax.tree.map(jnp.zeros_like, params)}
x = jnp.ones((512, 256), dtype)

@jax.jit
def step(params, state, x):
    def loss_fn(p):  # 16 heads of 64: a TPU's 128 lanes hold each row twice over
        heads = jnp.tanh(x @ p["w1"]).reshape(512, 16, 64)
        return jnp.mean(jnp.einsum("bhd,hde->bhe", heads, p["w2"]))
    grads = jax.grad(loss_fn)(params)
    mu = jax.tree.map(lambda m, g: 0.9 * m + 0.1 * g, state["mu"], grads)
    nu = jax.tree.map(lambda v, g: 0.99 * v + 0.01 * g * g, state["nu"], grads)
    return jax.tree.map(lambda p, m: p - m, params, mu), {"mu": mu, "nu": nu}

params, state = step(params, state, x)
print(json.dumps({"done": True}))
"""


def test_on_a_tpu_slice_f32_state_and_padding_get_their_figures(tmp_path):
    """On v5e, the f32 parameters and Adam moments the step takes: their bfloat16
    saving is what XLA:TPU's own plan of the bfloat16 step gives its arguments;
    and the shape its tiles pad most (heads of 64, in 128 lanes)."""

    def arguments(trace: Path) -> int:
        (target,) = analyze(load(trace)).tpu
        (step,) = [p for p in target.programs if p.name == "jit_step"]
        return sum(
            b.bytes
            for b in step.heap.live_at_peak
            if b.group == "parameter" and b.op_name.startswith(("params", "state"))
        )

    (tmp_path / "script.py").write_text(TPU_STEP)
    for name, extra in (("f32.tpumem", []), ("bf16.tpumem", ["--bf16"])):
        result = profile(
            tmp_path, "-q", "--tpu", "v5e:1x1", "-o", name, "script.py", *extra, env=aot_env()
        )
        assert result.returncode == 0, result.stderr[-3000:]
    analysis = analyze(load(tmp_path / "f32.tpumem"))
    (bf16,) = [c for c in analysis.changes if c.key == BF16]
    f32_bytes, bf16_bytes = arguments(tmp_path / "f32.tpumem"), arguments(tmp_path / "bf16.tpumem")
    assert bf16.before_bytes == f32_bytes
    assert bf16.bytes == f32_bytes - bf16_bytes > 0
    assert bf16.names == ("params", "state") and bf16.topology == "v5e:1x1"
    (padding,) = [c for c in analysis.changes if c.key == PADDING]
    (target,) = analysis.tpu
    (step,) = [p for p in target.programs if p.name == "jit_step"]
    by_shape: dict[str, int] = {}
    for buffer in step.heap.live_at_peak:
        shape = buffer.dtype + buffer.dims
        by_shape[shape] = by_shape.get(shape, 0) + buffer.bytes - buffer.unpadded_bytes
    shape = max(by_shape, key=by_shape.__getitem__)
    assert padding.names == (shape,) and shape.endswith(",64]")
    assert padding.bytes == by_shape[shape] >= padding.before_bytes // 2
