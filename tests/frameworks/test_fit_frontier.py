"""`tpumem fit --sweep batch=... --sweep remat=...` and `fit --search`: what fits
a slice, searched with XLA:TPU's compiles. A Llama-shaped step (its layers
scanned, each recomputed in the backward pass under --remat full) gives the
largest batch that fits per policy; each answer is held to JAX's own
ahead-of-time compile of the same step: the largest batch compiles with the
figures the trace holds, and the next is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tpu_aot import MEMORY, PRINT_MEMORY, aot_env

from conftest import run_python, run_tpumem
from tpumem.analysis import analyze
from tpumem.analysis.changes import LARGER, SEARCH
from tpumem.trace.reader import load

# `--aot`: the step compiled for one v5e chip by JAX's own API, its memory
# analysis printed (or XLA:TPU's refusal).
LLAMA = (
    PRINT_MEMORY
    + """
import argparse, json
import jax, jax.numpy as jnp

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=8)
parser.add_argument("--remat", default="none", choices=["none", "full"])
parser.add_argument("--aot", action="store_true")
parser.add_argument("--donate", action="store_true")
a = parser.parse_args()
D, F, L, V, SEQ = 1024, 2816, 4, 8000, 4096

def init(key):
    k = jax.random.split(key, 4)
    w = lambda i, *shape: jax.random.normal(k[i], shape) * 0.02
    layers = {"wq": w(0, L, D, D), "wo": w(0, L, D, D), "w1": w(1, L, D, F), "w2": w(2, L, F, D)}
    return {"embed": w(3, V, D), "layers": layers}

def block(x, w):
    h = x + jnp.tanh(x @ w["wq"]) @ w["wo"]
    return h + jax.nn.silu(h @ w["w1"]) @ w["w2"], None

def loss(params, tokens):
    x = params["embed"][tokens]
    body = block
    if a.remat == "full":
        body = jax.checkpoint(block, policy=jax.checkpoint_policies.nothing_saveable)
    x, _ = jax.lax.scan(body, x, params["layers"])
    return -jnp.mean(jax.nn.log_softmax(x @ params["embed"].T)[..., 0])

def step(params, moments, tokens):
    grads = jax.grad(loss)(params, tokens)
    moments = jax.tree.map(lambda m, g: 0.9 * m + g, moments, grads)
    return jax.tree.map(lambda p, m: p - 1e-3 * m, params, moments), moments

if a.aot:
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding
    chip = topologies.get_topology_desc(
        platform="tpu", topology_name="v5e:1x1", chips_per_host_bounds=[1, 1, 1]
    ).devices[0]
    on = lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=SingleDeviceSharding(chip))
    params = jax.tree.map(on, jax.eval_shape(init, jax.random.key(0)))
    tokens = on(jax.ShapeDtypeStruct((a.batch, SEQ), jnp.int32))
    try:
        donate = ("params", "moments") if a.donate else ()
        compiled = jax.jit(step, donate_argnames=donate).lower(params, params, tokens).compile()
    except Exception as error:
        print(json.dumps({"refused": str(error).splitlines()[0]}))
    else:
        print_memory(compiled)
    raise SystemExit

# (Made on the host, as a loaded checkpoint is: no init program to compile.)
shapes = jax.eval_shape(init, jax.random.key(0))
params = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
moments = jax.tree.map(jnp.zeros_like, params)
tokens = jnp.zeros((a.batch, SEQ), jnp.int32)
train_step = jax.jit(step)
for _ in range(3):
    params, moments = train_step(params, moments, tokens)
print("done")
"""
)


def _fit(
    tmp_path: Path, *args: str, script: str = LLAMA, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    (tmp_path / "script.py").write_text(script)
    return subprocess.run(
        [sys.executable, "-m", "tpumem", "fit", "--width", "200", "--tpu", "v5e-1", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        timeout=600,
    )


def _aot(tmp_path: Path, batch: int, remat: str, *more: str) -> dict:
    args = ["--aot", "--batch", str(batch), "--remat", remat, *more]
    return run_python(LLAMA, tmp_path, env=aot_env(), args=args)


def _step(trace: Path):
    (target,) = analyze(load(trace)).tpu
    return next(p for p in target.programs if p.name == "jit_step")


def test_a_sweep_of_batch_and_remat_gives_the_largest_batch_per_policy(tmp_path):
    result = _fit(tmp_path, "--sweep", "batch=8,32,64", "--sweep", "remat=none,full", "script.py")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = {
        tuple(cell.strip() for cell in line.split("│")[1:-1]): line
        for line in result.stdout.splitlines()
        if line.startswith("│")
    }
    frontier = {key[0]: key[1] for key in rows if len(key) == 2}
    # Without remat, batch 8 fits and 32 is refused (64 is not compiled: a larger
    # batch needs no less); with each layer recomputed, 32 fits and 64 does not.
    assert frontier["none"].startswith("8 (") and frontier["none"].endswith("32 does not fit")
    assert frontier["full"].startswith("32 (") and frontier["full"].endswith("64 does not fit")
    cells = {key[:2]: key[2] for key in rows if len(key) == 3}
    assert cells[("64", "none")] == "not compiled: --batch 32 did not fit"
    assert cells[("32", "none")].startswith("does not fit: refused")
    assert not (tmp_path / "script.fit-batch-64-remat-none.tpumem").exists()
    # A sweep is the search: its refusal gets no candidate and no diagnostic
    # compile (as --no-search gives the verdict alone).
    (refused,) = analyze(load(tmp_path / "script.fit-batch-32-remat-none.tpumem")).tpu
    assert refused.refused and not refused.candidates
    assert refused.refused[0].diagnostic is None
    assert "to show what fills it" not in result.stderr
    # Each answer is XLA:TPU's: JAX's own compile of the step at the largest
    # batch has the trace's figures, and at the next it is refused.
    for batch, over, remat in ((8, 32, "none"), (32, 64, "full")):
        fitted = _step(tmp_path / f"script.fit-batch-{batch}-remat-{remat}.tpumem")
        assert {k: fitted.memory(k) for k in MEMORY} == _aot(tmp_path, batch, remat)
        assert _aot(tmp_path, over, remat)["refused"].startswith("RESOURCE_EXHAUSTED")


def test_search_gives_the_largest_batch_a_step_that_fits_compiles_at(tmp_path):
    result = _fit(tmp_path, "--search", "script.py", "--batch", "16", "--remat", "full")
    assert result.returncode == 0, result.stderr[-3000:]
    analysis = analyze(load(tmp_path / "script.fit.tpumem"))
    (target,) = analysis.tpu
    # Doubled until XLA:TPU refused: 32 compiles, 64 does not.
    assert [c.change for c in target.candidates] == ["batch 32, not 16", "batch 64, not 16"]
    assert [c.program is not None for c in target.candidates] == [True, False]
    (larger,) = [c for c in analysis.changes if c.key == LARGER]
    assert larger.ops == ("batch 32, not 16", "batch 64, not 16")
    best = target.candidates[0]
    assert larger.before_bytes == best.need_bytes <= larger.pool_bytes
    said = " ".join(result.stdout.split())
    assert "jit_step also compiles at batch 32, not 16" in said
    assert "at batch 64 it does not fit" in said
    assert best.program is not None
    assert {k: best.program.memory(k) for k in MEMORY} == _aot(tmp_path, 32, "full")


def test_a_refused_scanned_step_is_searched_with_its_layers_recomputed(tmp_path):
    """Batch 16 without remat is refused, and still refused donated; with each
    step of the script's scan recomputed it fits: JAX's own compile of the step
    donated under --remat full has the candidate's figures, and XLA's count of
    its operations is the larger."""
    refused = _fit(tmp_path, "script.py", "--batch", "16")
    assert refused.returncode == 1, refused.stderr[-3000:]
    analysis = analyze(load(tmp_path / "script.fit.tpumem"))
    (target,) = analysis.tpu
    assert [c.program is not None for c in target.candidates] == [False, True]
    candidate = target.candidates[-1]
    scan = next(n for n, line in enumerate(LLAMA.splitlines(), 1) if "jax.lax.scan(" in line)
    assert f"each step of the scan at script.py:{scan} recomputed" in candidate.change
    (search,) = [c for c in analysis.changes if c.key == SEARCH]
    assert search.before_bytes == candidate.need_bytes <= search.pool_bytes
    assert search.flops is not None and search.flops_before is not None
    assert search.flops > search.flops_before  # the forward pass again
    assert candidate.program is not None
    independent = _aot(tmp_path, 16, "full", "--donate")
    assert {k: candidate.program.memory(k) for k in MEMORY} == independent


# Flax NNX's train step, as its tutorials write it: nnx.jit, the model and the
# optimizer as arguments, updated in place. 32 f32[8192,8192] layers: refused on
# one v5e chip unless donated. DONATE=1: the step donated, as the advice says.
# (Zeros, not random kernels: fit runs the eager init for real, and 8 GiB of
# random numbers take two cores half a minute; the step compiles the same.)
NNX = """
import os
import jax, jax.numpy as jnp, optax
from flax import nnx

class MLP(nnx.Module):
    def __init__(self, rngs):
        self.layers = nnx.List(
            [nnx.Linear(
                8192, 8192, use_bias=False, kernel_init=nnx.initializers.zeros, rngs=rngs
            ) for _ in range(32)]
        )
    def __call__(self, x):
        for layer in self.layers:
            x = jnp.tanh(layer(x))
        return x

model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.sgd(1e-3), wrt=nnx.Param)
donate = ("model", "optimizer") if os.environ.get("DONATE") else ()

@nnx.jit(donate_argnames=donate)
def train_step(model, optimizer, x):
    loss, grads = nnx.value_and_grad(lambda m: (m(x) ** 2).mean())(model)
    optimizer.update(model, grads)
    return loss

x = jnp.ones((128, 8192))
for _ in range(2):
    train_step(model, optimizer, x)
"""


def test_an_nnx_step_gets_donation_in_nnx_words_and_the_donated_step_needs_its_figure(tmp_path):
    refused = _fit(tmp_path, "script.py", script=NNX)
    assert refused.returncode == 1, refused.stderr[-3000:]
    analysis = analyze(load(tmp_path / "script.fit.tpumem"))
    (search,) = [c for c in analysis.changes if c.key == SEARCH]
    (candidate,) = analysis.tpu[0].candidates
    assert candidate.change.startswith(
        "donated (nnx.jit(..., donate_argnames=('model', 'optimizer'))"
    )
    assert search.before_bytes is not None and search.before_bytes <= search.pool_bytes
    # The script changed as said: XLA:TPU compiles it at the advice's figure.
    donated = _fit(tmp_path, "-o", "donated.tpumem", "script.py", script=NNX, env={"DONATE": "1"})
    assert donated.returncode == 0, donated.stderr[-3000:]
    (target,) = analyze(load(tmp_path / "donated.tpumem")).tpu
    assert target.fit is not None and target.fit.need_bytes == search.before_bytes


def test_sweeps_fit_cannot_make_are_one_line_before_any_compile(tmp_path):
    (tmp_path / "script.py").write_text("print('never run')\n")
    for args, said in (
        (["--sweep", "batch=8,16", "--sweep", "batch=32"], "--sweep batch=... given twice"),
        (["--sweep", "batch=8,16,8"], "8 given twice"),
        (
            ["--sweep", "a=" + ",".join("123456789"), "--sweep", "b=" + ",".join("12345678")],
            "72 combinations",
        ),
    ):
        bad = run_tpumem("fit", "--tpu", "v5e-1", *args, "script.py", cwd=tmp_path)
        assert bad.returncode == 2 and said in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr and "never run" not in bad.stdout


# fit's search helpers on JAX's own objects, on eight CPU devices.
HELPERS = """
import json, os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from tpumem.adapters.jax import search

devices = tuple(jax.devices())
mesh = Mesh(np.array(devices), ("fsdp",))
split = NamedSharding(mesh, P("fsdp", None))
whole = NamedSharding(mesh, P())
def shape(dims, sharding=None, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(dims, dtype, sharding=sharding)
state = {"w": shape((1024, 64), split), "count": shape((), whole)}
said = {}
# Nearly all its bytes split over the eight: sharded already (a whole count aside).
said["split"] = search._split_over((state,), (0,), 8)
said["whole"] = search._split_over(({"w": shape((1024, 64), whole)},), (0,), 8)
# A raw random key first is no batch; the batch halved stays split where 8 divides it.
key, tokens = shape((2,), dtype=jnp.uint32), shape((16, 128), split, jnp.int32)
(_, halved_key, halved), batch = search._scaled_batch((state, key, tokens), {0}, 0.5)
said["batch"] = batch
said["key"] = list(halved_key.shape)
said["halved"] = [list(halved.shape), list(halved.sharding.spec)]
(_, _, quarter), _ = search._scaled_batch((state, key, shape((12, 128), split)), {0}, 0.5)
said["indivisible"] = [list(quarter.shape), list(quarter.sharding.spec)]
# The script's scan named by its line; JAX's scan itself again after.
def body(c, x):
    return c + x, None
lines = search.scan_lines(lambda: jax.jit(lambda xs: jax.lax.scan(body, 0.0, xs)[0]).trace(
    jnp.ones(4)))
said["lines"] = list(lines)
# A sweep's kept sharding rebuilt over the same devices: jax.make_mesh's explicit
# axes and a Mesh's automatic ones, each as it was.
from tpumem.adapters.jax import compile_cache
explicit = NamedSharding(jax.make_mesh((8,), ("fsdp",)), P("fsdp", None))
said["kept"] = [
    compile_cache._sharding(compile_cache._described(s), list(devices)) == s
    for s in (explicit, split)
]
said["types"] = [str(t) for t in explicit.mesh.axis_types]
said["restored"] = jax.lax.scan.__module__
print(json.dumps(said))
"""


def test_the_searchs_helpers_on_jaxs_own_objects(tmp_path):
    said = run_python(HELPERS, tmp_path)
    assert said["split"] is True and said["whole"] is False
    assert said["batch"] == 16 and said["key"] == [2]
    assert said["halved"] == [[8, 128], ["fsdp", None]]
    assert said["indivisible"] == [[6, 128], [None, None]]
    line = next(n for n, text in enumerate(HELPERS.splitlines(), 1) if "jax.lax.scan(body" in text)
    assert said["lines"] == [f"script.py:{line}"]
    assert said["kept"] == [True, True] and said["types"] == ["AxisType.Explicit"]
    assert said["restored"].startswith("jax")


# An init jitted apart from the step, its parameters split over the slice's four
# chips: the sweep's points change the step's batch, not the init.
SHARDED_INIT = """
import argparse
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

parser = argparse.ArgumentParser()
parser.add_argument("--batch", type=int, default=8)
a = parser.parse_args()
split = NamedSharding(Mesh(np.array(jax.devices()), ("fsdp",)), P("fsdp", None))

@jax.jit
def init(key):
    params = [jax.random.normal(k, (2048, 2048)) for k in jax.random.split(key, 4)]
    return jax.lax.with_sharding_constraint(params, [split] * 4)

def loss(params, x):
    for w in params:
        x = jnp.tanh(x @ w)
    return (x ** 2).mean()

@jax.jit
def step(params, x):
    grads = jax.grad(loss)(params, x)
    return [w - 1e-3 * g for w, g in zip(params, grads)]

params = init(jax.random.key(0))
for _ in range(2):
    params = step(params, jnp.ones((a.batch, 2048)))
print("done")
"""


def test_a_sweep_compiles_a_program_its_values_do_not_change_once(tmp_path):
    """The init is compiled at the first point and read back at the second; the
    step, whose batch changed, is compiled at each. The second point's programs
    are those a fit of that batch alone compiles, the step's parameters still
    split over the chips (one chip's share of them as its outputs)."""
    (tmp_path / "script.py").write_text(SHARDED_INIT)
    swept = run_tpumem("fit", "--tpu", "v5e-4", "--sweep", "batch=8,16", "script.py", cwd=tmp_path)
    assert swept.returncode == 0, swept.stderr[-3000:]
    said = swept.stderr.splitlines()
    assert [line for line in said if "not compiled again" in line] == [
        "tpumem fit: v5e:2x2: jit_init: compiled earlier in this sweep; not compiled again"
    ]
    assert len([line for line in said if "compiled jit_step in" in line]) == 2
    alone = run_tpumem(
        "fit", "--tpu", "v5e-4", "-o", "alone.tpumem", "script.py", "--batch", "16", cwd=tmp_path
    )
    assert alone.returncode == 0, alone.stderr[-3000:]

    def programs(trace: str) -> dict:
        (target,) = analyze(load(tmp_path / trace)).tpu
        assert target.fit is not None
        figures = {p.name: {k: p.memory(k) for k in MEMORY} for p in target.programs}
        return {"need": target.fit.need_bytes, **figures}

    reused = programs("script.fit-batch-16.tpumem")
    assert reused == programs("alone.tpumem")
    # The JSON report says which program was read back, not compiled.
    said_json = run_tpumem("report", "script.fit-batch-16.tpumem", "--format", "json", cwd=tmp_path)
    (tpu,) = json.loads(said_json.stdout)["tpu"]
    assert {p["name"]: p["reused"] for p in tpu["programs"]} == {
        "jit_init": True,
        "jit_step": False,
    }
    share = 4 * 2048 * 2048 * 4 // 4  # (XLA:TPU adds a few bytes of its own)
    assert share <= reused["jit_step"]["output_bytes"] < 2 * share
