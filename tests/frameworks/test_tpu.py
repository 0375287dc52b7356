"""`--tpu`: the run's programs compiled by XLA:TPU for a TPU topology, ahead of time
on this machine (libtpu, no TPU), against an independent ahead-of-time compile of
the same functions with JAX's own API in the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tpu_aot import ARRAY_SIZES, MEMORY, PRINT_MEMORY, aot_env, entry_parameters

from conftest import assert_one_line_error, run_python, run_tpumem
from profiling import EXAMPLES, profile, run_compare
from tpumem.analysis import analyze
from tpumem.analysis.changes import REMAT, what_to_change
from tpumem.analysis.processes import ProcessSummary
from tpumem.reading.summary_files import read_summary
from tpumem.tpu.compile import LIBTPU_VARIABLE, libtpu_path
from tpumem.trace.reader import load
from tpumem.units import format_bytes

sys.path.insert(0, str(Path(__file__).parent.parent / "browser"))
from chromium_check import rendered

TINY = ["--width", "64", "--layers", "1", "--seq", "16", "--vocab", "128", "--batch", "4"]

# XLA:TPU's own figures for the example's train step, compiled by JAX's AOT path.
INDEPENDENT_STEP = """
import json, sys
sys.path.insert(0, {examples!r})
import jax
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding
import jax_transformer
from jax_common import adam_init
from model_config import parse_args

step, params, inputs, targets = jax_transformer.build(parse_args("transformer", None, {args!r}))
chip = topologies.get_topology_desc(
    platform="tpu", topology_name="v5e:1x1", chips_per_host_bounds=[1, 1, 1]
).devices[0]
def spec(tree):
    return jax.tree.map(
        lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=SingleDeviceSharding(chip)), tree
    )
lowered = step.lower(spec(params), spec(adam_init(params)), spec(inputs), spec(targets))
print_memory(lowered.compile())
"""

# A step sharded over a 2x2 mesh, run on four CPU devices (FOUR_CPUS); its weight's
# shards of 2000 columns pad on a TPU (its lanes are 128 wide), and it is donated.
SHARDED = (
    PRINT_MEMORY
    + """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

def step(w, x):
    return jnp.tanh(x @ w).sum(), w * 0.5

def shardings(devices):
    mesh = Mesh(np.array(devices).reshape(2, 2), ("a", "b"))
    return NamedSharding(mesh, P(None, "a")), NamedSharding(mesh, P("b", None))

jitted = jax.jit(step, donate_argnums=(0,))
shapes = [((1000, 4000), jnp.bfloat16), ((128, 1000), jnp.bfloat16)]
if sys.argv[1:] == ["aot"]:
    from jax.experimental import topologies
    chips = topologies.get_topology_desc(
        platform="tpu", topology_name="v5e:2x2", chips_per_host_bounds=[2, 2, 1]
    ).devices
    specs = [jax.ShapeDtypeStruct(s, d, sharding=h) for (s, d), h in zip(shapes, shardings(chips))]
    print_memory(jitted.lower(*specs).compile())
else:
    placed = zip(shapes, shardings(jax.devices()))
    w, x = (jax.device_put(jnp.ones(s, d), h) for (s, d), h in placed)
    loss, w = jitted(w, x)
    print(float(loss))
"""
)


FOUR_CPUS = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}


def _tpu_program(analysis, topology: str, name: str):
    (target,) = [t for t in analysis.tpu if t.topology == topology]
    return target, next(p for p in target.programs if p.name == name)


def test_the_jax_train_step_on_v5e_equals_an_independent_aot_compile(tmp_path):
    """Every figure XLA:TPU gives the step compiled from the run's HLO is the one
    JAX's own AOT compile of the same function gives; the fit table answers v5e
    from it."""
    args = [*TINY, "--steps", "2"]
    result = profile(
        tmp_path,
        "--tpu",
        "v5e:1x1",
        "-o",
        "run.tpumem",
        str(EXAMPLES / "jax_transformer.py"),
        *args,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "for v5e:1x1 with XLA:TPU in" in result.stderr
    analysis = analyze(load(tmp_path / "run.tpumem"))
    target, step = _tpu_program(analysis, "v5e:1x1", "jit_step")
    assert target.device_kind == "TPU v5 lite" and not target.failed
    script = PRINT_MEMORY + INDEPENDENT_STEP.format(examples=str(EXAMPLES), args=args)
    independent = run_python(script, tmp_path, env=aot_env())
    assert {k: step.memory(k) for k in MEMORY} == independent
    # The donated parameters and optimizer state alias the outputs on the TPU too.
    assert independent["alias_bytes"] > 0
    # The TPU buffer assignment: its parameters are the arguments XLA:TPU counted.
    assert step.heap is not None and step.heap.parameter_bytes == independent["argument_bytes"]
    (row,) = [r for r in analysis.fit.rows if r.accelerator == "TPU v5e"]
    assert row.compiled_for == "v5e:1x1"
    assert row.needed_bytes == target.fit.need_bytes >= step.need_bytes
    assert target.fit.running_at_peak and target.fit.program == "jit_step"
    # A chip's need by kind: XLA:TPU's buffers of the step, each argument of the
    # kind the run gave it (the model's 67,520 float32 parameters, Adam's two
    # moments of them and its step count); the kinds add up to the need.
    chip = {k.kind: k.bytes for k in target.fit.kinds}
    run = {k.kind: k.bytes for k in analysis.devices[0].kinds.kinds}
    assert sum(chip.values()) == target.fit.need_bytes
    assert chip["parameters"] == run["parameters"] == 67_520 * 4
    assert chip["optimizer_state"] == run["optimizer_state"] == 2 * 67_520 * 4 + 4
    arguments = [b for b in step.heap.live_at_peak if b.group == "parameter"]
    told = chip["parameters"] + chip["optimizer_state"] + chip["inputs"]
    assert told == sum(min(b.unpadded_bytes, b.allocation_bytes) for b in arguments)
    assert chip["overhead"] >= step.code_bytes + step.padding_bytes
    # A later report reads the compile from the trace, and says where the v5e answer is from.
    report = run_tpumem("report", str(tmp_path / "run.tpumem"), "--full", "--width", "200")
    assert report.returncode == 0, report.stderr
    assert "compiled for v5e:1x1 by XLA:TPU, per chip" in report.stdout
    assert "On v5e:1x1 (TPU v5 lite)" in report.stdout
    # The first screen says the CPU's temporaries are not the TPU's, with both.
    (running,) = analysis.devices[0].programs_at_peak
    assert abs(running.temp_bytes - step.temp_bytes) > 0.1 * running.temp_bytes
    said = " ".join(report.stdout.split())
    assert (
        f"jit_step: XLA:TPU plans {format_bytes(step.temp_bytes)} of temporaries on "
        f"v5e:1x1 where this run held {format_bytes(running.temp_bytes)}"
    ) in said
    as_json = run_tpumem("report", str(tmp_path / "run.tpumem"), "-f", "json")
    (tpu,) = json.loads(as_json.stdout)["tpu"]
    assert tpu["topology"] == "v5e:1x1" and tpu["fit"]["program"] == "jit_step"
    assert {k["kind"]: k["bytes"] for k in tpu["fit"]["kinds"]} == chip
    # Advice on the target's plan: the CPU's temporaries would name a line to
    # recompute; XLA:TPU's plan of the step, whose values stay out of HBM, names
    # none, and no advice is the CPU's.
    on_the_cpu = what_to_change("cpu", analysis.metadata.memory_settings, analysis.devices)
    assert [c for c in on_the_cpu if c.key == REMAT]
    assert all(c.topology == "v5e:1x1" for c in analysis.changes if c.key == REMAT)
    assert "One chip of v5e:1x1 by kind" in said
    # The page, in a real browser: the TPU section with the step's need per chip.
    page = tmp_path / "run.html"
    assert run_tpumem("report", str(tmp_path / "run.tpumem"), "-o", str(page)).returncode == 0
    problems, dom = rendered(page)
    assert problems == []
    assert "On v5e:1x1 (TPU v5 lite)" in dom and format_bytes(step.need_bytes) in dom


def test_a_sharded_step_on_v5e_2x2_equals_an_independent_aot_compile_and_shows_its_padding(
    tmp_path,
):
    (tmp_path / "sharded.py").write_text(SHARDED)
    result = profile(
        tmp_path, "-q", "--tpu", "v5e:2x2", "-o", "run.tpumem", "sharded.py", env=FOUR_CPUS
    )
    assert result.returncode == 0, result.stderr[-3000:]
    analysis = analyze(load(tmp_path / "run.tpumem"))
    target, step = _tpu_program(analysis, "v5e:2x2", "jit_step")
    assert step.compile.partitions == 4 and not target.failed
    independent = json.loads(run_aot(tmp_path / "sharded.py", aot_env()).strip().splitlines()[-1])
    assert {k: step.memory(k) for k in MEMORY} == independent
    assert independent["alias_bytes"] > 0  # the donated weight, sharded
    # Per chip: half the 1000 x 4000 weight's columns (split over "a"), padded from
    # 2000 to 2048 lanes.
    assert independent["argument_bytes"] < 1000 * 4000 * 2
    assert step.padding_bytes > 0
    weight = max(step.heap.live_at_peak, key=lambda b: b.bytes)
    assert weight.dims == "[1000,2000]" and weight.bytes == 1000 * 2048 * 2


def run_aot(script: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, str(script), "aot"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_without_libtpu_the_run_keeps_its_report_and_says_what_tpu_needs(tmp_path):
    (tmp_path / "sharded.py").write_text(SHARDED)
    result = profile(
        tmp_path,
        "--tpu",
        "v5e:2x2",
        "-o",
        "run.tpumem",
        "sharded.py",
        env={**FOUR_CPUS, LIBTPU_VARIABLE: str(tmp_path / "nowhere")},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "tpumem: no TPU compile: --tpu needs libtpu" in result.stderr
    assert "Would it fit?" in result.stderr  # the report, with the estimate
    assert not analyze(load(tmp_path / "run.tpumem")).tpu


def test_a_topology_tpumem_does_not_know_is_one_line_before_anything_runs(tmp_path):
    (tmp_path / "never.py").write_text("raise SystemExit('ran')\n")
    for name, words in (
        ("v9x:2x2", "v5e-8"),
        ("v5e:2x2x2", "NxN"),
        ("v4", "generation"),
        ("v5e-2", "v5e-8"),
        ("v5p-12", "TensorCores"),
    ):
        result = run_tpumem("profile", "--tpu", name, str(tmp_path / "never.py"), cwd=tmp_path)
        assert_one_line_error(result, "--tpu", words)


def test_the_three_frameworks_step_programs_side_by_side_on_v5e(tmp_path):
    """`compare --tpu`: the training step of the same transformer in TensorFlow
    (jit_compile), JAX and PyTorch/XLA, each compiled for v5e by XLA:TPU from the
    HLO its framework handed to XLA. Per framework, the arguments XLA:TPU counts
    are its parameters at the sizes independent identity compiles give their
    shapes; each step aliases its updated state to its inputs on the TPU too."""
    scripts = {
        "tf_transformer": ["--jit-compile"],
        "jax_transformer": [],
        "torch_xla_transformer": [],
    }
    result = run_compare(
        tmp_path,
        *(
            " ".join([str(EXAMPLES / f"{name}.py"), *TINY, "--steps", "2", *extra])
            for name, extra in scripts.items()
        ),
        *("--tpu", "v5e:1x1", "--format", "json", "--output-dir", str(tmp_path)),
        *("--html", str(tmp_path / "compare.html")),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    comparison = json.loads(result.stdout)
    rows = {row["figure"]: row for row in comparison["program_rows"]}
    names = rows["Step program"]["values"]
    assert names[0].startswith("a_inference_train_step_") and names[1] == "jit_step"
    assert names[2].startswith("SyncTensorsGraph.")
    assert rows["Step program"]["labels"] == ["running at the peak"] * 3
    per_chip = rows["On v5e:1x1: the step alone, per chip"]["values"]
    for index, (name, run) in enumerate(zip(scripts, comparison["runs"], strict=True)):
        assert run["tpu"], (name, result.stderr[-3000:])
        (target,) = run["tpu"]
        assert target["failed"] == [], name
        (step,) = [p for p in target["programs"] if p["name"].startswith(names[index])]
        assert per_chip[index] == step["need_bytes"] > 0
        assert step["alias_bytes"] > 0, name  # variables, donated state
        shapes = entry_parameters(tmp_path / f"{name}.tpumem", step["name"])
        # 64-bit shapes as 64-bit: JAX narrows them to 32 bits unless told.
        env = {**aot_env(), "JAX_ENABLE_X64": "1"}
        sizes = run_python(ARRAY_SIZES, tmp_path, env=env, args=[json.dumps(shapes)])
        assert step["argument_bytes"] == sum(sizes), name
        # A chip's need by kind adds up to it; the same model's parameters, and
        # Adam's two moments of them, are the same bytes on a chip in each
        # (TensorFlow's first jit_compile step holds its variables' first values,
        # one zeros tensor shared by several, beside their new ones: its
        # arguments are still its variables, of their kinds).
        chip = {k["kind"]: k["bytes"] for k in target["fit"]["kinds"]}
        assert sum(chip.values()) == target["fit"]["need_bytes"], name
        assert chip["parameters"] == 67_520 * 4, name
        assert 2 * 67_520 * 4 <= chip["optimizer_state"] <= 2 * 67_520 * 4 + 16, name
        if name == "torch_xla_transformer":  # its step's outputs: the .grad tensors
            assert chip["gradients"] == 67_520 * 4
    # A chip by kind, side by side: the same model's parameters on each.
    assert rows["On v5e:1x1: a chip's parameters"]["values"] == [67_520 * 4] * 3
    problems, dom = rendered(tmp_path / "compare.html")
    assert problems == []
    assert "compiled program, side by side" in dom and names[1] in dom
    assert "On v5e:1x1: a chip's optimizer state" in dom


def test_two_compiles_at_once_both_finish(tmp_path):
    """libtpu locks the machine's TPU for one process (/tmp/libtpu_lockfile): a
    compile, which uses no TPU, must not need it (two reports at once, or one
    beside a training job on a TPU VM)."""
    (tmp_path / "sharded.py").write_text(SHARDED)
    result = profile(tmp_path, "-q", "-o", "a.tpumem", "sharded.py", env=FOUR_CPUS)
    assert result.returncode == 0, result.stderr[-3000:]
    (tmp_path / "b.tpumem").write_bytes((tmp_path / "a.tpumem").read_bytes())
    reports = [
        subprocess.Popen(
            [sys.executable, "-m", "tpumem", "report", name, "--tpu", "v5e:2x2"],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a.tpumem", "b.tpumem")
    ]
    for report in reports:
        _, errors = report.communicate(timeout=600)
        assert report.returncode == 0 and "with XLA:TPU in" in errors, errors[-2000:]
    # a.tpumem's summary (its profile's) was made again for the trace the compiles
    # appended to; b.tpumem, a copy, had none and is left so.
    summary = read_summary(tmp_path / "a.tpumem")
    assert isinstance(summary, ProcessSummary), summary
    assert "no summary beside it" in str(read_summary(tmp_path / "b.tpumem"))


def test_libtpu_is_where_only_tpumem_looks():
    """`tpumem install-libtpu` (which make setup runs) puts XLA:TPU in libtpu/ of
    the environment: --tpu finds it, and the environment's own `import jax` does
    not (it would print TPU start-up errors on every start without a TPU)."""
    from importlib.util import find_spec

    import tomllib

    from tpumem.commands.install_libtpu import libtpu_requirement

    assert libtpu_requirement().startswith("libtpu==")
    assert libtpu_path() == str(Path(sys.prefix) / "libtpu")
    assert find_spec("libtpu") is None
    pyproject = Path(__file__).resolve().parent.parent.parent / "pyproject.toml"
    extras = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]
    assert not [r for rs in extras.values() for r in rs if "[tpu]" in r or "libtpu" in r]
