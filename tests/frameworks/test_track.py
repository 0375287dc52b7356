"""`tpumem.track`: the capture of `tpumem profile` inside the user's own process,
on real JAX in a process of its own (a notebook's case: JAX imported and used
before, and used after)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import run_python
from jax_scripts import COUNTS_ITSELF, KNOWN_LINES
from tpumem.analysis import analyze
from tpumem.analysis.processes import ProcessSummary
from tpumem.reading.summary_files import read_summary
from tpumem.trace.reader import load

KiB, MiB = 1 << 10, 1 << 20
SMALL_ARRAYS = 16 * KiB  # as in test_profile_jax.py: JAX's own small arrays

# What tpumem replaces in JAX while it records, read before and after the block.
PATCHED = """
import os
from jax._src import dispatch, pjit
from jax._src.interpreters import pxla
def patched():
    return [id(x) for x in (pjit._cpp_pjit, pjit._get_fastpath_data, pjit.jit_p.impl,
            dispatch._batched_device_put_impl, pxla.ExecuteReplicated.__call__,
            jax.profiler.StepTraceAnnotation.__init__)] + [os.environ.get("XLA_FLAGS")]
"""

# JAX in use before the block, as in a notebook: a function jitted, arrays made.
KNOWN_IN_A_BLOCK = (
    COUNTS_ITSELF
    + PATCHED
    + """
import tpumem
scale = jax.jit(lambda a: a * 3)
warm = scale(jnp.ones((8,))); del warm; note()
before = patched()
with tpumem.track("known.tpumem") as run:
"""
    + textwrap.indent(KNOWN_LINES, "    ")
    + """
    tripled = scale(held[-1]); note()  # jitted before the block: 4 MiB more
    del tripled; note()
after = patched()
inside = jax.jit(lambda a: a + 1)
print(json.dumps({
    "peak": peak,
    "restored": before == after,
    "jit_after": type(inside).__name__,
    "works_after": float(scale(jnp.ones((2,))).sum()),
    "text": run.report("text", full=True),
}))
"""
)


def _line(text: str) -> int:
    return next(n for n, line in enumerate(KNOWN_IN_A_BLOCK.splitlines(), 1) if text in line)


def test_a_block_records_what_the_cli_records_and_jax_is_as_before_after_it(tmp_path):
    result = run_python(KNOWN_IN_A_BLOCK, tmp_path)
    counted = result["peak"]["CPU:0"]
    assert counted == 25 * MiB
    analysis = analyze(load(tmp_path / "known.tpumem"))
    (device,) = analysis.devices
    assert device.fidelity == "buffer"
    # The same bounds as `tpumem profile` of the same lines (test_profile_jax.py).
    assert counted <= device.peak.bytes <= counted + SMALL_ARRAYS
    groups = {(g.op, g.shape, g.source) for g in device.peak.groups}
    put, doubled = (_line(text) for text in ("jax.device_put", "extra * 2"))
    assert ("device_put", "[1024,2048]", f"script.py:{put}") in groups
    assert ("multiply", "[1024,2048]", f"script.py:{doubled}") in groups
    book = analysis.metadata.extra.buffer_book
    # Every array the block made came through a hook, though JAX made its jitted
    # functions (jnp's, and `scale`) before tpumem started.
    assert book.arrays_entered >= 8
    # Afterwards: every patch put back, XLA_FLAGS as it was, jit is JAX's own.
    assert result["restored"] is True
    assert result["jit_after"] == "PjitFunction"
    assert result["works_after"] == 6.0
    assert analysis.metadata.source == "tpumem.track"
    assert "Ended              the tracked block ended" in result["text"]
    # What cannot be set once JAX runs is said, with the line that sets it.
    assert any(
        "JAX_CPU_ENABLE_ASYNC_DISPATCH=false in the environment" in w for w in analysis.warnings
    )


ONE_AT_A_TIME = """
import json
import jax, jax.numpy as jnp
import tpumem
from tpumem.errors import TpumemError
errors = []
with tpumem.track("outer.tpumem"):
    try:
        with tpumem.track("inner.tpumem"):
            pass
    except TpumemError as error:
        errors.append(str(error))
try:
    with tpumem.track("raised.tpumem"):
        kept = jnp.ones((1024, 1024))
        raise ValueError("the model diverged")
except ValueError as error:
    errors.append(f"passed on: {error}")

@tpumem.track("each.tpumem")
def step(n):
    return jnp.ones((n,)).sum()

step(10); step(20)
try:
    tpumem.track("x.tpumem", framework="flax").start()
except TpumemError as error:
    errors.append(str(error))
print(json.dumps(errors))
"""


def test_one_at_a_time_a_block_that_raises_keeps_its_trace_and_each_call_its_own(tmp_path):
    errors = run_python(ONE_AT_A_TIME, tmp_path)
    assert errors[0] == "tpumem.track is already recording (to outer.tpumem): one at a time"
    assert errors[1] == "passed on: the model diverged"
    assert "unknown framework 'flax'" in errors[2]
    assert not (tmp_path / "inner.tpumem").exists()
    raised = analyze(load(tmp_path / "raised.tpumem"))
    assert raised.complete and raised.metadata.exit.exception == "ValueError: the model diverged"
    assert raised.devices[0].peak.bytes >= 4 * MiB
    # The decorated function: a trace per call, the second numbered.
    assert (tmp_path / "each.tpumem").exists() and (tmp_path / "each-2.tpumem").exists()
    # Each recording left its summary as it stopped, standing for its trace.
    for name in ("outer", "raised", "each", "each-2"):
        summary = read_summary(tmp_path / f"{name}.tpumem")
        assert isinstance(summary, ProcessSummary), summary
    assert summary.source == "tpumem.track" and summary.made_from == "summary"


def test_without_a_framework_imported_track_says_what_to_do(tmp_path):
    script = (
        "import json, tpumem\nfrom tpumem.errors import TpumemError\n"
        "with tpumem.track() as run:\n    pass\n"
        "try:\n    run.report()\n"
        "except TpumemError as error:\n    print(json.dumps(str(error)))\n"
    )
    message = run_python(script, tmp_path)
    assert message.startswith("tpumem.track has recorded nothing: the process imported none")
    assert not list(tmp_path.glob("*.tpumem"))


def test_a_framework_imported_inside_the_block_is_recorded(tmp_path):
    """The recording starts as the block imports its framework, as `tpumem
    profile` starts it; the block's arrays are in it."""
    script = (
        "import json, sys, tpumem\n"
        "with tpumem.track('inside.tpumem') as run:\n"
        "    import jax.numpy as jnp\n"
        "    kept = jnp.ones((4 * 1024 * 1024,), jnp.float32)\n"  # 16 MiB
        "    kept.block_until_ready()\n"
        "analysis = run.report()\n"
        "print(json.dumps([analysis.metadata.framework, analysis.devices[0].peak.bytes]))\n"
    )
    framework, peak = run_python(script, tmp_path)
    assert framework == "jax"
    assert peak >= 16 << 20


def test_a_block_that_imports_torch_then_torch_xla_records_pytorch_xla(tmp_path):
    """Plain PyTorch's recording, started at torch's import, lets go as torch_xla's
    import begins: one trace, PyTorch/XLA's, of the block's device tensors."""
    script = (
        "import json, tpumem\n"
        "with tpumem.track('both.tpumem') as run:\n"
        "    import torch\n"
        "    host = torch.ones(1024, 1024)\n"  # 4 MiB on the host: not the device's
        "    import torch_xla\n"
        "    kept = torch.ones(512, 1024, device=torch_xla.device()) * 2\n"  # 2 MiB
        "    torch_xla.sync()\n"
        "analysis = run.report()\n"
        "print(json.dumps([analysis.metadata.framework, analysis.devices[0].peak.bytes]))\n"
    )
    framework, peak = run_python(script, tmp_path, env={"PJRT_DEVICE": "CPU"})
    assert framework == "torch_xla"
    assert 2 << 20 <= peak < 4 << 20
    assert [p.name for p in tmp_path.glob("*.tpumem")] == ["both.tpumem"]


# A child forked inside a recorded block tracks itself: its own trace, its own
# array; the parent's recording stays the parent's. (JAX is imported after the
# fork, in each process: a JAX that ran before a fork deadlocks in the child.)
FORKED = """
import json, os
import tpumem
with tpumem.track("parent.tpumem"):
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            with tpumem.track("child.tpumem"):
                import jax.numpy as jnp
                theirs = jnp.ones((1024 * 1024,), jnp.float32).block_until_ready()  # 4 MiB
            said = "recorded"
        except Exception as error:
            said = f"{type(error).__name__}: {error}"
        os.write(write, said.encode())
        os._exit(0)
    os.close(write)
    said = os.read(read, 4096).decode()
    os.waitpid(child, 0)
    import jax.numpy as jnp
    mine = jnp.ones((256 * 1024,), jnp.float32).block_until_ready()  # 1 MiB
print(json.dumps({"child": said, "child_pid": child, "pid": os.getpid()}))
"""


def test_a_child_forked_from_a_tracked_block_records_its_own(tmp_path):
    (tmp_path / "script.py").write_text(FORKED)
    run = subprocess.run(
        [sys.executable, "script.py"], capture_output=True, text=True, cwd=tmp_path, timeout=180
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["child"] == "recorded"  # (it said 'already recording (to parent.tpumem)')
    child, parent = load(tmp_path / "child.tpumem"), load(tmp_path / "parent.tpumem")
    assert (child.metadata.pid, parent.metadata.pid) == (result["child_pid"], result["pid"])
    assert child.complete and parent.complete
    assert MiB <= analyze(parent).devices[0].peak.bytes < 4 * MiB
    assert analyze(child).devices[0].peak.bytes >= 4 * MiB


# TensorFlow in use before the block (which imports JAX too), the same tensors as
# test_profile_tensorflow.py's KNOWN_ALLOCATIONS inside it, twice: a second
# recording in the same process starts its own profiler session.
TENSORFLOW_TWICE = """
import json, sys
import tensorflow as tf
from tensorflow.python.framework import constant_op
from tensorflow.python.profiler import profiler_v2, trace
import tpumem

def patched():
    return [id(x) for x in (constant_op.convert_to_eager_tensor, profiler_v2.start,
            tf.profiler.experimental.stop, trace.Trace.__init__)]

double = tf.function(lambda a: a * 2)
warm = double(tf.ones([8]))
before = patched()
peaks = []
for name in ("first.tpumem", "second.tpumem"):
    tf.config.experimental.reset_memory_stats("CPU:0")
    with tpumem.track(name):
        held = [tf.ones([1024, 256 * (i + 1)]) for i in range(4)]  # 1, 2, 3, 4 MiB
        del held[0]
        extra = tf.ones([2048, 1024])  # 8 MiB on top of 9 MiB
        del extra
        peaks.append(tf.config.experimental.get_memory_info("CPU:0")["peak"])
        del held
print(json.dumps({
    "jax_imported": "jax" in sys.modules,
    "peaks": peaks,
    "restored": before == patched(),
    "works_after": float(tf.reduce_sum(double(tf.ones([2])))),
}))
"""


# TensorFlow's default CPU allocator is oneDNN's where oneDNN is on (by default
# only on some x86 CPUs); the test names it rather than take the machine's.
@pytest.mark.parametrize("bfc", [True, False], ids=["bfc", "onednn-cpu-allocator"])
def test_a_tensorflow_block_records_tensorflows_own_peak_and_twice(tmp_path, bfc):
    env = {"TF_CPU_ALLOCATOR_USE_BFC": "true" if bfc else "false", "TF_ENABLE_ONEDNN_OPTS": "1"}
    result = run_python(TENSORFLOW_TWICE, tmp_path, env=env)
    # TensorFlow imported JAX, but it is TensorFlow's runtime that ran.
    assert result["jax_imported"] is True
    assert result["restored"] is True and result["works_after"] == 4.0
    for name, peak in zip(("first", "second"), result["peaks"], strict=True):
        analysis = analyze(load(tmp_path / f"{name}.tpumem"))
        assert analysis.metadata.framework == "tensorflow" and analysis.complete
        (device,) = analysis.devices
        shapes = {group.shape for group in device.peak.groups}
        assert {"[1024,512]", "[1024,768]", "[1024,1024]", "[2048,1024]"} <= shapes
        if bfc:  # the allocator tpumem would have chosen: TensorFlow's own counters
            assert device.fidelity == "allocator"
            assert device.peak.bytes == peak >= 17 * MiB
        else:  # it cannot be chosen once TensorFlow runs: said, with the line that sets it
            assert device.peak.bytes >= 17 * MiB
            assert any(
                "TF_CPU_ALLOCATOR_USE_BFC=true in the environment before TensorFlow starts" in w
                for w in analysis.warnings
            )


# PyTorch/XLA imported, not yet started, at the first block; in use at the second.
TORCH_XLA_TWICE = """
import json
import torch, torch_xla
import torch_xla.distributed.xla_multiprocessing as xmp
from torch_xla import _XLAC
import tpumem

def patched():
    return [id(x) for x in (_XLAC._xla_step_marker, xmp.spawn, torch.optim.Optimizer.step)]

before = patched()
for name in ("first.tpumem", "second.tpumem"):
    with tpumem.track(name):
        x = torch.ones(1024, 256, device="xla")  # 1 MiB
        big = torch.ones(2048, 1024, device="xla") * 2  # 8 MiB
        y = (x @ x.T).sum()  # a 4 MiB product inside the graph: its temp
        torch_xla.sync()
        del big
        torch_xla.sync()
print(json.dumps({
    "restored": before == patched(),
    "works_after": float((torch.ones(3, device="xla") * 2).sum().item()),
}))
"""


def test_a_torch_xla_block_records_tensors_and_graph_temps_and_twice(tmp_path):
    result = run_python(TORCH_XLA_TWICE, tmp_path, env={"PJRT_DEVICE": "CPU"})
    assert result == {"restored": True, "works_after": 6.0}
    first, second = (analyze(load(tmp_path / f"{n}.tpumem")) for n in ("first", "second"))
    for analysis in (first, second):
        assert analysis.metadata.framework == "torch_xla" and analysis.complete
        (device,) = analysis.devices
        groups = {(g.op, g.shape): g.bytes for g in device.peak.groups}
        assert groups[("mul", "[2048,1024]")] == 8 * MiB
        assert groups[("ones", "[1024,256]")] == 1 * MiB
        (program,) = analysis.programs  # the second block's: compiled in the first
        assert groups[(program.name, None)] == program.temp_bytes >= 4 * MiB
        assert device.peak.bytes == sum(groups.values())
    assert not first.warnings
    # The second block started with PyTorch/XLA in use: said so.
    assert any("PyTorch/XLA was in use before tpumem started" in w for w in second.warnings)
