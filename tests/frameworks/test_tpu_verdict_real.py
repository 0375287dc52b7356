"""Will it fit on a TPU slice: the verdict of `--tpu` against XLA:TPU itself
(libtpu on this machine, no TPU). A train step that is only compiled, never run
(its state is shapes, as MaxText plans a model), on either side of the v5e
threshold: tpumem's answer flips where XLA:TPU's compile outcome flips, its
figures are those of an independent ahead-of-time compile of the same function,
and a refused compile is a "does not fit" with XLA:TPU's own figures, on which
`check --tpu` fails."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tpu_aot import MEMORY, PRINT_MEMORY, aot_env

from conftest import run_python, run_tpumem
from profiling import profile
from tpumem.analysis import analyze
from tpumem.hlo.refusals import refusal
from tpumem.trace.reader import load
from tpumem.units import format_bytes

sys.path.insert(0, str(Path(__file__).parent.parent / "browser"))
from chromium_check import rendered

# An MLP train step of N f32[8192,8192] layers: 31 fit a v5e chip, 32 do not
# (XLA:TPU's own outcome, checked in the test). `--keep` also runs one small
# array, so the run has allocations of its own; `aot` compiles it for v5e:1x1
# with JAX's own API instead (`aot v5p`: for v5p:1x1x1), and prints XLA:TPU's
# figures or its refusal.
MLP_STEP = (
    PRINT_MEMORY
    + """
import json, sys
import jax, jax.numpy as jnp

layers = int(sys.argv[1])

def loss(params, x):
    for w in params:
        x = jnp.tanh(x @ w)
    return (x ** 2).mean()

def step(params, x):
    grads = jax.grad(loss)(params, x)
    return [w - 0.01 * g for w, g in zip(params, grads)]

where = {}
if "aot" in sys.argv:
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding
    name = "v5p:1x1x1" if "v5p" in sys.argv else "v5e:1x1"
    chip = topologies.get_topology_desc(
        platform="tpu", topology_name=name, chips_per_host_bounds=[1, 1, 1]
    ).devices[0]
    where = {"sharding": SingleDeviceSharding(chip)}
params = [jax.ShapeDtypeStruct((8192, 8192), jnp.float32, **where) for _ in range(layers)]
x = jax.ShapeDtypeStruct((128, 8192), jnp.float32, **where)
if "--keep" in sys.argv:
    kept = jnp.ones((1024, 1024), jnp.float32).block_until_ready()
try:
    compiled = jax.jit(step).lower(params, x).compile()
except Exception as error:
    if "aot" not in sys.argv:
        raise
    print(json.dumps({"refused": str(error)}))
else:
    print_memory(compiled)
"""
)


def _aot(tmp_path: Path, layers: int, *on: str) -> dict:
    return run_python(MLP_STEP, tmp_path, env=aot_env(), args=[str(layers), "aot", *on])


def _profiled(tmp_path: Path, layers: int, *extra: str):
    (tmp_path / "mlp_step.py").write_text(MLP_STEP)
    name = f"mlp{layers}{''.join(extra)}.tpumem"
    result = profile(
        tmp_path, "-q", "--tpu", "v5e-1", "-o", name, "mlp_step.py", str(layers), *extra
    )
    assert result.returncode == 0, result.stderr[-3000:]
    analysis = analyze(load(tmp_path / name))
    (target,) = analysis.tpu
    assert target.topology == "v5e:1x1"  # the Cloud slice's name, as libtpu names it
    return tmp_path / name, analysis, target


def test_the_verdict_flips_where_xla_tpus_compile_does(tmp_path):
    # 31 layers: XLA:TPU compiles it; every figure is the independent compile's.
    trace, analysis, target = _profiled(tmp_path, 31)
    independent = _aot(tmp_path, 31)
    (program,) = target.programs
    assert {k: program.memory(k) for k in MEMORY} == independent
    fit = target.fit
    assert fit is not None and fit.fits and not target.refused
    assert fit.need_bytes == program.need_bytes  # nothing else was live: nothing ran
    # Against XLA:TPU's budget measured from libtpu: under the datasheet's 16 GiB,
    # inside the rounding of the "15.75G" XLA:TPU names, and above what compiled.
    assert target.budget is not None and target.budget.libtpu
    usable = target.budget.usable_bytes
    assert abs(usable - 15.75 * 2**30) <= 0.005 * 2**30 and usable < 16 * 2**30
    assert fit.usable_bytes == usable and 0 < fit.spare_bytes < 0.02 * usable
    # A run that allocated nothing still gets the fit table, from XLA:TPU alone.
    (row,) = [r for r in analysis.fit.rows if r.compiled_for == "v5e:1x1"]
    assert row.fits and row.memory_bytes == usable and row.needed_bytes == fit.need_bytes
    checked = run_tpumem("check", str(trace), "--tpu", "v5e:1x1")
    assert checked.returncode == 0, checked.stderr

    # 32 layers: XLA:TPU refuses it; tpumem says so with XLA:TPU's own figures.
    trace, analysis, target = _profiled(tmp_path, 32)
    independent = _aot(tmp_path, 32)
    assert "RESOURCE_EXHAUSTED" in independent["refused"]
    (refused,) = target.refused
    assert not target.programs and not target.failed
    said = refusal(independent["refused"])
    assert said is not None and said.over is not None and said.over.bytes > 0
    assert refused.refusal == said
    assert refused.message.strip() == independent["refused"].strip()  # whole, every line
    assert target.fit is not None and not target.fit.fits
    assert target.fit.refused == "jit_step"
    (row,) = [r for r in analysis.fit.rows if r.compiled_for == "v5e:1x1"]
    assert not row.fits
    # What fills it: the plan XLA:TPU makes for it on a v5p chip (95 GiB), whose
    # state is the independent v5p compile's, its buffers with the script's lines.
    assert refused.diagnostic == "v5p:1x1x1" and refused.heap is not None
    on_v5p = _aot(tmp_path, 32, "v5p")
    assert refused.heap.parameter_bytes == on_v5p["argument_bytes"]
    assert refused.heap.output_bytes == on_v5p["output_bytes"]
    report = run_tpumem("report", str(trace), "--width", "200")
    assert report.returncode == 0, report.stderr
    assert "DOES NOT FIT on v5e:1x1: XLA:TPU refused jit_step" in report.stdout
    assert f"over by {format_bytes(said.over.bytes, 2)}" in report.stdout
    assert "as XLA:TPU plans it for v5p:1x1x1" in report.stdout
    assert "not v5e:1x1's own plan" in report.stdout and "mlp_step.py:" in report.stdout
    as_json = json.loads(run_tpumem("report", str(trace), "-f", "json").stdout)
    (tpu,) = as_json["tpu"]
    assert tpu["refused"][0]["over"]["bytes"] == said.over.bytes and not tpu["fit"]["fits"]
    diagnostic = tpu["refused"][0]["diagnostic"]
    assert diagnostic["topology"] == "v5p:1x1x1"
    assert diagnostic["heap"]["peak_bytes"] == refused.heap.peak_bytes
    checked = run_tpumem("check", str(trace), "--tpu", "v5e:1x1")
    assert checked.returncode == 1
    assert "tpumem: breach: DOES NOT FIT on v5e:1x1" in checked.stderr
    # The page, in a real browser: the verdict, and the refused program's row.
    page = tmp_path / "mlp32.html"
    assert run_tpumem("report", str(trace), "-o", str(page)).returncode == 0
    problems, dom = rendered(page)
    assert problems == []
    assert "DOES NOT FIT on v5e:1x1" in dom and "(refused)" in dom


def test_a_small_array_kept_does_not_shrink_the_need(tmp_path):
    """The need is never below the program's own: its arguments are on the chip
    while it runs, though the run never made them (it once said "fits, 4.1 MiB")."""
    _, _, alone = _profiled(tmp_path, 31)
    _, analysis, kept = _profiled(tmp_path, 31, "--keep")
    assert analysis.devices  # the kept array: the run allocated
    assert alone.fit is not None and kept.fit is not None
    assert kept.fit.need_bytes >= alone.fit.need_bytes == alone.programs[0].need_bytes
    assert kept.fit.fits == alone.fit.fits
    (row,) = [r for r in analysis.fit.rows if r.compiled_for == "v5e:1x1"]
    assert row.needed_bytes == kept.fit.need_bytes
