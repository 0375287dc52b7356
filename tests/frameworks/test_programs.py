"""What fills each compiled program: tpumem's reading of XLA's buffer assignment
against XProf's own memory_viewer on the same HloProtos (real runs), and the
rules of the heap walk on hand-made ones."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import run_python, run_tpumem
from hlo_builder import hlo_proto as _proto
from profiling import EXAMPLES, profile
from tpumem.analysis import analyze
from tpumem.analysis.compiled.program_heap import program_heap
from tpumem.hlo.schema import ALLOC, FREE, SHARE_WITH, HloError
from tpumem.trace.reader import load
from xprof_runner import memory_viewer as _memory_viewer

MiB = 1 << 20
SMALL = 16 * 1024  # XProf's memory_viewer lumps buffers below this together


def _as_bytes(mib: float) -> int:
    return round(mib * MiB)


def _xprof_buffers(viewer: dict) -> tuple[list[tuple], int]:
    """(buffers at the peak as (instruction, bytes, shape, kind), bytes of the small ones)."""
    buffers, small = [], 0
    for heap_object in viewer["maxHeap"]:
        size = _as_bytes(heap_object["logicalBufferSizeMib"])
        if heap_object.get("logicalBufferId", -1) == -1:
            small += size
            continue
        kind = heap_object["groupName"].lower()
        buffers.append((heap_object["instructionName"], size, heap_object["shapeString"], kind))
    return sorted(buffers), small


def _tpumem_buffers(heap) -> tuple[list[tuple], int]:
    big = [b for b in heap.live_at_peak if b.bytes >= SMALL]
    small = sum(b.bytes for b in heap.live_at_peak if b.bytes < SMALL)
    return sorted((b.instruction, b.bytes, b.shape, b.group) for b in big), small


def _signature_of_heap(heap) -> tuple:
    sizes = list(heap.heap_bytes) if heap.has_heap_trace else []
    return (heap.module, heap.peak_bytes, heap.parameter_bytes, *_tpumem_buffers(heap), sizes)


def _signature_of_viewer(viewer: dict) -> tuple:
    return (
        viewer["moduleName"],
        _as_bytes(viewer["peakHeapMib"]),
        _as_bytes(viewer.get("entryComputationParametersMib", 0)),
        *_xprof_buffers(viewer),
        [_as_bytes(v) for v in viewer.get("heapSizes", [])],
    )


def test_every_jax_program_agrees_with_xprofs_memory_viewer(tmp_path):
    """The JAX transformer example: every program it compiled (the train step and
    the eager ops), exported where TensorBoard finds them and read by XProf."""
    sizes = ["--width", "64", "--layers", "1", "--seq", "32", "--steps", "3"]
    result = profile(
        tmp_path, "-q", "-o", "run.tpumem", str(EXAMPLES / "jax_transformer.py"), *sizes
    )
    assert result.returncode == 0, result.stderr[-3000:]
    analysis = analyze(load(tmp_path / "run.tpumem"))
    exported = run_tpumem(
        "export", "tensorboard", str(tmp_path / "run.tpumem"), "--logdir", str(tmp_path / "tb")
    )
    assert exported.returncode == 0, exported.stderr
    viewer = _memory_viewer(tmp_path / "tb" / "plugins" / "profile" / "run")

    planned = [p for p in analysis.compiled if p.heap is not None]
    assert len(planned) == len(viewer) == len(analysis.compiled) > 10
    assert {v["moduleName"] for v in viewer.values()} == {p.name for p in planned}
    # The same programs, each with the same figures (programs of one name, told
    # apart by what they hold).
    ours = sorted(_signature_of_heap(p.heap) for p in planned)
    theirs = sorted(_signature_of_viewer(v) for v in viewer.values())
    assert ours == theirs
    step = next(p for p in planned if p.name == "jit_step")
    # The train step: temporaries at its peak, with the user's source lines; and
    # XLA's own totals for it say the same (its arguments are donated to its outputs).
    heap = step.heap
    assert heap.temp_peak_bytes > 0 and heap.peak_instruction
    assert any(b.source and "jax_common.py" in b.source for b in heap.live_at_peak)
    memory = step.memory
    assert memory is not None and memory.name == "jit(step)"
    # The device peak is the step's temporaries (the size XLA planned) + arrays.
    (device,) = analysis.devices
    (running,) = device.programs_at_peak
    assert running.program is step and running.temp_bytes == memory.temp_bytes
    assert heap.parameter_bytes == memory.argument_bytes
    assert heap.output_bytes == memory.output_bytes
    assert heap.total_allocation_bytes - heap.whole_program_bytes == memory.temp_bytes


TF_JIT_STEP = """
import json
import tensorflow as tf

w = tf.Variable(tf.ones((256, 256)))
x = tf.ones((512, 256))

@tf.function(jit_compile=True)
def step(x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.tanh(x @ w) ** 2)
    w.assign_sub(0.01 * tape.gradient(loss, w))
    return loss

for _ in range(3):
    loss = step(x)
print(json.dumps({"loss": float(loss)}))
"""


def _agrees_with_memory_viewer(tmp_path: Path, trace: Path) -> list:
    """Exports the trace for TensorBoard and checks every program against XProf's
    memory_viewer; the programs with a plan."""
    exported = run_tpumem("export", "tensorboard", str(trace), "--logdir", str(tmp_path / "tb"))
    assert exported.returncode == 0, exported.stderr
    run = trace.name.removesuffix(".tpumem")
    viewer = _memory_viewer(tmp_path / "tb" / "plugins" / "profile" / run)
    planned = [p for p in analyze(load(trace)).compiled if p.heap is not None]
    assert planned and len(planned) == len(viewer)
    assert sorted(_signature_of_heap(p.heap) for p in planned) == sorted(
        _signature_of_viewer(v) for v in viewer.values()
    )
    return planned


def test_a_torch_xla_training_step_agrees_with_xprofs_memory_viewer(tmp_path):
    sizes = ["--width", "128", "--layers", "2", "--steps", "3"]
    result = profile(tmp_path, "-q", "-o", "t.tpumem", str(EXAMPLES / "torch_xla_mlp.py"), *sizes)
    assert result.returncode == 0, result.stderr[-3000:]
    planned = _agrees_with_memory_viewer(tmp_path, tmp_path / "t.tpumem")
    graphs = [p for p in planned if p.name.startswith("SyncTensorsGraph")]
    assert graphs
    # The step's graph: PyTorch/XLA's own account of it (its debug output, sizes
    # to 1e-6 GiB) is the same program as XLA's buffer assignment.
    step = max(graphs, key=lambda p: p.peak_bytes)
    assert step.memory is not None and step.memory.name.startswith("graph ")
    assert abs(step.memory.argument_bytes - step.heap.parameter_bytes) <= 1024


def test_a_tensorflow_jit_compiled_function_agrees_with_xprofs_memory_viewer(tmp_path):
    (tmp_path / "tf_step.py").write_text(TF_JIT_STEP)
    result = profile(tmp_path, "-q", "-o", "tf.tpumem", "tf_step.py")
    assert result.returncode == 0, result.stderr[-3000:]
    planned = _agrees_with_memory_viewer(tmp_path, tmp_path / "tf.tpumem")
    step = max(planned, key=lambda p: p.peak_bytes)
    # The variable and the input are its parameters; its temporaries are the step's.
    assert step.heap.parameter_bytes >= (256 * 256 + 512 * 256) * 4
    assert step.heap.temp_peak_bytes > 0


def test_the_users_xla_flags_and_dump_survive(tmp_path):
    script = tmp_path / "two.py"
    script.write_text(
        "import json, jax, jax.numpy as jnp\n"
        "f = jax.jit(lambda x: (x @ x.T).sum())\n"
        "print(json.dumps({'devices': jax.device_count(), 'y': float(f(jnp.ones((64, 64))))}))\n"
    )
    mine = tmp_path / "mine"
    flags = f"--xla_force_host_platform_device_count=2 --xla_dump_to={mine}"
    env = {"XLA_FLAGS": flags, "TMPDIR": str(tmp_path / "tmp")}
    (tmp_path / "tmp").mkdir()
    result = profile(tmp_path, "-q", "-o", "two.tpumem", "two.py", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1])["devices"] == 2
    # Their dump holds what they asked for (text, XLA's default) and stays theirs.
    assert list(mine.glob("*jit__lambda*after_optimizations.txt"))
    analysis = analyze(load(tmp_path / "two.tpumem"))
    assert any(p.name == "jit__lambda" and p.heap for p in analysis.compiled)
    assert any("added --xla_dump_hlo_as_proto" in w for w in analysis.warnings)
    # Without a dump of their own, tpumem's goes where nothing is left behind.
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    result = profile(tmp_path, "-q", "-o", "three.tpumem", "two.py", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1])["devices"] == 2
    assert os.listdir(tmp_path / "tmp") == []
    assert any(p.heap for p in analyze(load(tmp_path / "three.tpumem")).compiled)
    # And --no-programs leaves XLA_FLAGS as the user set it.
    result = profile(tmp_path, "-q", "--no-programs", "-o", "four.tpumem", "two.py", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert not any(p.heap for p in analyze(load(tmp_path / "four.tpumem")).compiled)


# -- the heap walk, on hand-made buffer assignments ------------------------------


def test_the_peak_counts_whole_program_buffers_and_the_heap_at_its_highest():
    data = _proto(
        {1: 4096, 2: 1000, 3: 2000, 4: 500, 5: 8192},
        [(ALLOC, 2), (ALLOC, 3), (FREE, 2), (ALLOC, 4), (FREE, 3), (FREE, 4)],
        {1: "parameter", 5: "output"},
    )
    heap = program_heap(data)
    whole = 4096 + 8192
    assert heap.whole_program_bytes == whole and heap.parameter_bytes == 4096
    assert heap.output_bytes == 8192
    assert heap.peak_bytes == whole + 3000 and heap.peak_instruction == "i3"
    assert heap.heap_bytes == tuple(whole + s for s in (0, 1000, 3000, 2000, 2500, 500, 0))
    live = [(b.instruction, b.bytes, b.group, b.source) for b in heap.live_at_peak]
    assert live == [
        ("i5", 8192, "output", "/work/model.py:5"),
        ("i1", 4096, "parameter", "/work/model.py:1"),
        ("i3", 2000, "temporary", "/work/model.py:3"),
        ("i2", 1000, "temporary", "/work/model.py:2"),
    ]
    assert heap.live_at_peak[0].shape == "f32[2048]" and heap.live_at_peak[0].op_name == "op5"


def test_a_shared_buffer_holds_its_memory_until_the_last_user_frees_it():
    """SHARE_WITH: buffer 3 reuses buffer 2's memory. While both hold it, it is
    counted once; when 2 is freed first, 3 still holds it; a share made after
    the canonical buffer was freed takes the memory again, shown under the sharer."""
    heap = program_heap(
        _proto(
            {2: 1000, 3: 1000, 4: 300},
            [(ALLOC, 2), (SHARE_WITH, 3, 2), (FREE, 2), (ALLOC, 4), (FREE, 3), (FREE, 4)],
            {},
        )
    )
    assert heap.heap_bytes == (0, 1000, 1000, 1000, 1300, 300, 0)
    assert heap.peak_bytes == 1300
    assert [b.instruction for b in heap.live_at_peak] == ["i2", "i4"]
    later = program_heap(
        _proto(
            {2: 1000, 3: 1000, 4: 300},
            [(ALLOC, 2), (FREE, 2), (ALLOC, 4), (SHARE_WITH, 3, 2), (FREE, 3), (FREE, 4)],
            {},
        )
    )
    assert later.heap_bytes == (0, 1000, 0, 300, 1300, 300, 0)
    assert {b.instruction for b in later.live_at_peak} == {"i3", "i4"}


def test_a_heap_that_frees_twice_or_bytes_that_are_not_a_proto_are_refused():
    with pytest.raises(HloError):
        program_heap(_proto({2: 1000}, [(ALLOC, 2), (FREE, 2), (FREE, 2)], {}))
    with pytest.raises(HloError):
        program_heap(b"\x0a\xff\xff")


JAX_PROFILE = """
import json, pathlib
import jax, jax.numpy as jnp
from jax._src.lib import _profiler

options = _profiler.ProfileOptions()
options.enable_hlo_proto = True  # the programs, as TPU profiles carry them
session = _profiler.ProfilerSession(options)

def loss(w, x):
    h = jnp.tanh(x @ w)
    return ((h @ w.T) ** 2).mean()

step = jax.jit(jax.grad(loss))
w, x = jnp.ones((256, 256)), jnp.ones((512, 256))
for _ in range(2):
    w = w - 0.01 * step(w, x)
run = pathlib.Path("profile/plugins/profile/run")
run.mkdir(parents=True)
(run / "host.xplane.pb").write_bytes(session.stop())
print(json.dumps({"done": True}))
"""


def test_a_profile_that_carries_its_programs_imports_them_as_xprof_reads_them(tmp_path):
    """JAX's own profiler, asked for the programs' HLO (as on a TPU): `tpumem import`
    reads them from the XSpace, and XProf's memory_viewer reads the same file."""
    run_python(JAX_PROFILE, tmp_path)
    imported = run_tpumem("import", str(tmp_path / "profile"), "-o", str(tmp_path / "p.tpumem"))
    assert imported.returncode == 0, imported.stderr
    assert "compiled programs" in imported.stdout
    analysis = analyze(load(tmp_path / "p.tpumem"))
    # XProf extracts the programs into files beside the profile, then reads them.
    viewer = _memory_viewer(tmp_path / "profile" / "plugins" / "profile" / "run")
    planned = [p for p in analysis.compiled if p.heap is not None]
    assert {p.name for p in planned} >= {"jit_loss"} and len(planned) == len(viewer)
    assert sorted(_signature_of_heap(p.heap) for p in planned) == sorted(
        _signature_of_viewer(v) for v in viewer.values()
    )
    step = next(p for p in planned if p.name == "jit_loss")
    assert step.heap.has_heap_trace and step.heap.temp_peak_bytes >= 512 * 256 * 4
