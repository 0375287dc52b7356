"""Real profiles made by the frameworks themselves, each in its own process."""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import run_python, run_tpumem
from tpumem.analysis import analyze
from tpumem.analysis.allocators.bfc_model import replay
from tpumem.analysis.allocators.chunk_map import AddressMap
from tpumem.analysis.device_events import split_by_device
from tpumem.trace.reader import load

TF_SCRIPT = """
import json, os
os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
import tensorflow as tf

tf.profiler.experimental.start("logdir")
kept = []
for i in range(60):
    a = tf.random.normal([64 + 7 * i, 96])
    b = tf.matmul(a, a, transpose_b=True)
    if i % 4 == 0:
        kept.append(b)
    if i % 6 == 0 and kept:
        kept.pop(0)
tf.profiler.experimental.stop()
print(json.dumps(tf.config.experimental.get_memory_info("CPU:0")))
"""

# TF writes fragmentation with six significant digits; the figures agree to that.
REPORTED_PRECISION = 1e-5


@pytest.fixture(scope="module")
def tf_profile(tmp_path_factory):
    work = tmp_path_factory.mktemp("tf")
    memory_info = run_python(TF_SCRIPT, work)
    result = run_tpumem("import", "logdir", "-o", "tf.tpumem", cwd=work)
    assert result.returncode == 0, result.stderr
    return work, memory_info


def test_imported_peak_equals_tensorflows_own(tf_profile):
    work, memory_info = tf_profile
    result = run_tpumem("report", "tf.tpumem", "--format", "json", cwd=work)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (device,) = report["devices"]
    assert device["device"] == "CPU:0"
    assert device["fidelity"] == "allocator"
    assert device["peak"]["bytes"] == memory_info["peak"]
    assert device["peak"]["label"] == "measured"
    assert report["framework"] == "tensorflow"


def test_address_map_fragmentation_agrees_event_by_event(tf_profile):
    work, _ = tf_profile
    (events,) = split_by_device(load(work / "tf.tpumem"))
    assert len(events) > 200
    remade = AddressMap(events).fragmentation_at(np.arange(len(events)))
    error = np.abs(remade - events.reported_fragmentation)
    assert error.max() <= REPORTED_PRECISION
    assert events.reported_fragmentation.max() > 0.1  # the check had something to check


def test_bfc_model_reproduces_the_real_allocator(tf_profile):
    """The model sees only requested sizes and lifetimes. The capture starts with
    a fresh allocator, so it must reproduce the allocator's chunk sizes and bytes
    in use exactly, and its fragmentation to the precision TF writes it with."""
    work, _ = tf_profile
    (events,) = split_by_device(load(work / "tf.tpumem"))
    model = replay(events.is_alloc, events.requested, events.buffer_id)
    assert (model.in_use == events.in_use).all()
    error = np.abs(model.fragmentation - events.reported_fragmentation)
    assert error.max() <= REPORTED_PRECISION


def test_report_shows_the_figures_and_their_provenance(tf_profile):
    work, _ = tf_profile
    result = run_tpumem("report", "tf.tpumem", "--full", "--width", "200", cwd=work)
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "fidelity: allocator" in text
    assert "measured (the allocator's own figure)" in text
    assert "Address-map check" in text
    assert "MatMul" in text


JAX_SCRIPT = """
import json
import jax, jax.numpy as jnp
jax.profiler.start_trace("logdir")
x = jnp.ones((256, 256))
(x @ x).block_until_ready()
jax.profiler.stop_trace()
print(json.dumps({"ok": True}))
"""


def test_a_real_jax_cpu_profile_has_programs_but_no_memory_events_and_import_says_so(tmp_path):
    """JAX's profiler records no allocator events on the CPU, but its profile
    carries the compiled programs: those are imported, and the report says why
    there are no memory figures."""
    run_python(JAX_SCRIPT, tmp_path)
    result = run_tpumem("import", "logdir", "-o", "jax.tpumem", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "0 memory events" in result.stdout and "compiled programs" in result.stdout
    analysis = analyze(load(tmp_path / "jax.tpumem"))
    assert not analysis.devices
    assert any(
        "no MemoryAllocation/MemoryDeallocation" in w or "no memory events" in w
        for w in analysis.warnings
    )
    # x @ x: x is both its parameters; a [256,256] float32 is 256 KiB.
    (matmul,) = [p.heap for p in analysis.compiled if p.name == "jit_matmul"]
    assert (matmul.parameter_bytes, matmul.output_bytes) == (2 * 256 * 1024, 256 * 1024)
