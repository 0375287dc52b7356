"""`tpumem profile` on real JAX scripts (CPU), each run in its own processes."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import printed_report
from jax_scripts import COUNTS_ITSELF, KNOWN_LINES
from profiling import (
    BAD_ENDINGS,
    EXAMPLES,
    last_json,
    profile,
    profile_bad_ending,
    run_plain,
    until_written,
)
from tpumem.analysis import analyze
from tpumem.trace.reader import load

KiB, MiB = 1 << 10, 1 << 20
# JAX's own small arrays (scalars made for constants, PRNG keys) that a script's
# count of its own arrays does not see at the same moment: what tpumem may differ by.
SMALL_ARRAYS = 16 * KiB

KNOWN_SIZES = COUNTS_ITSELF + KNOWN_LINES + 'print(json.dumps({"peak": peak}))\n'


def line_of(script: str, text: str) -> int:
    return next(n for n, line in enumerate(script.splitlines(), 1) if text in line)


def test_the_peak_is_the_live_bytes_the_script_counts(tmp_path):
    (tmp_path / "known.py").write_text(KNOWN_SIZES)
    result = profile(tmp_path, "known.py")
    assert result.returncode == 0, result.stderr[-3000:]
    counted = last_json(result.stdout)["peak"]["CPU:0"]
    assert counted == 25 * MiB
    trace = load(tmp_path / "known.tpumem")
    analysis = analyze(trace)
    (device,) = analysis.devices
    assert device.device == "CPU:0" and device.fidelity == "buffer"
    assert counted <= device.peak.bytes <= counted + SMALL_ARRAYS
    groups = {(g.op, g.shape, g.source) for g in device.peak.groups}
    ones, put, doubled = (line_of(KNOWN_SIZES, text) for text in ("jnp.ones", "device_put", "* 2"))
    assert ("device_put", "[1024,2048]", f"known.py:{put}") in groups
    assert ("multiply", "[1024,2048]", f"known.py:{doubled}") in groups
    assert {
        ("broadcast_in_dim", f"[{256 * 1024 * n}]", f"known.py:{ones}") for n in (2, 3, 4)
    } <= groups
    assert analysis.metadata.set_by_tpumem == {"JAX_CPU_ENABLE_ASYNC_DISPATCH": "false"}
    book = analysis.metadata.extra.buffer_book
    assert book.arrays_found_by_poll == 0  # every array came through a hook
    assert book.arrays_entered >= 8


SHARDED = (
    COUNTS_ITSELF
    + """
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((4,), ("x",))
rows = NamedSharding(mesh, P("x"))
split = jax.device_put(np.ones((1024, 256), np.float32), rows); note()  # 256 KiB a device
copied = jax.device_put(np.ones((512, 256), np.float32), NamedSharding(mesh, P())); note()
scaled = jax.jit(lambda a: a * 3, out_shardings=rows)(split); note()  # 256 KiB a device
del copied; note()
print(json.dumps({"peak": peak, "shards": [s.data.shape for s in split.addressable_shards]}))
"""
)


def test_each_device_holds_its_shards(tmp_path):
    (tmp_path / "sharded.py").write_text(SHARDED)
    flags = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    result = profile(tmp_path, "sharded.py", env=flags)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = last_json(result.stdout)
    assert printed["shards"] == [[256, 256]] * 4
    analysis = analyze(load(tmp_path / "sharded.tpumem"))
    devices = {d.device: d for d in analysis.devices}
    assert sorted(devices) == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"]
    for name, device in devices.items():
        counted = printed["peak"][name]
        assert counted == 256 * KiB + 512 * KiB + 256 * KiB
        assert counted <= device.peak.bytes <= counted + SMALL_ARRAYS
        shapes = {g.shape for g in device.peak.groups}
        assert {"[256,256]", "[512,256]"} <= shapes  # a shard, and a whole replica
    assert analysis.total_peak_bytes >= 4 * 1024 * KiB


DONATES = """
import sys
import jax, jax.numpy as jnp
donate = sys.argv[1] == "donate"
update = jax.jit(lambda p, g: p - 0.1 * g, donate_argnums=(0,) if donate else ())
params = jnp.ones((2048, 1024), jnp.float32)  # 8 MiB
grads = jnp.full((2048, 1024), 0.5, jnp.float32)  # 8 MiB
for _ in range(3):
    params = update(params, grads)
params.block_until_ready()
"""


def test_a_donated_argument_is_reused_not_doubled(tmp_path):
    (tmp_path / "update.py").write_text(DONATES)
    peaks, traces = {}, {}
    for mode in ("donate", "keep"):
        result = profile(tmp_path, "-o", f"{mode}.tpumem", "update.py", mode)
        assert result.returncode == 0, result.stderr[-3000:]
        traces[mode] = load(tmp_path / f"{mode}.tpumem")
        (device,) = analyze(traces[mode]).devices
        peaks[mode] = device.peak.bytes
    # Without donation the old and the new parameters are live together.
    assert abs(peaks["keep"] - peaks["donate"] - 8 * MiB) <= SMALL_ARRAYS
    assert analyze(traces["donate"]).metadata.extra.buffer_book.arrays_donated == 3
    # The program writes its result into the donated buffer: each free of the
    # parameters is followed, at the same moment, by an allocation at its address.
    rows = traces["donate"].table.to_pylist()
    big = [r for r in rows if r["kind"] in ("alloc", "free") and r["bytes"] == 8 * MiB]
    reused = [
        (a, b)
        for a, b in itertools.pairwise(big)
        if a["kind"] == "free" and b["kind"] == "alloc" and a["address"] == b["address"]
    ]
    assert len(reused) == 3 and all(a["time_ns"] == b["time_ns"] for a, b in reused)


@pytest.mark.parametrize(
    ("example", "sizes"),
    [
        ("jax_mlp.py", ["--width", "256", "--layers", "2", "--steps", "5"]),
        ("jax_transformer.py", ["--width", "64", "--layers", "1", "--seq", "32", "--steps", "5"]),
    ],
)
def test_the_examples_profile_end_to_end(tmp_path, example, sizes):
    result = profile(tmp_path, "--full", "-o", "run.tpumem", str(EXAMPLES / example), *sizes)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = last_json(result.stdout)
    trace = load(tmp_path / "run.tpumem")
    analysis = analyze(trace)
    (device,) = analysis.devices
    assert set(trace.numbers("step")[trace.valid("step")].tolist()) == set(range(5))
    # Parameters, Adam's two moments and the new parameters, all float32.
    assert device.peak.bytes >= 3 * 4 * printed["params"]
    assert device.peak.step is not None
    step = [p for p in analysis.programs if p.name == "jit(step)"]
    assert len(step) == 1 and step[0].alias_bytes >= 3 * 4 * printed["params"]
    regions = {g.region for g in device.peak.groups}
    assert "temp" in regions or not step[0].temp_bytes
    assert "Compiled programs" in result.stderr and "Buffers" in result.stderr


BEFORE_THE_END = (
    """
import time
import jax.numpy as jnp
kept = jnp.ones((512, 1024))  # 2 MiB
"""
    + until_written()  # (the book's rows are written)
    + """
{ending}
"""
)


@pytest.mark.parametrize("ending", sorted(BAD_ENDINGS))
def test_a_run_that_ends_badly_keeps_its_trace(tmp_path, ending):
    profile_bad_ending(tmp_path, BEFORE_THE_END, BAD_ENDINGS[ending])
    (device,) = analyze(load(tmp_path / "bad.tpumem")).devices
    assert device.peak.bytes >= 2 * MiB
    assert "[512,1024]" in {group.shape for group in device.peak.groups}


JIT_STILL_WORKS = """
import functools, inspect, json
import jax, jax.numpy as jnp

@jax.jit
def square(x):
    return x * x

class Model:
    scale = 3.0
    @functools.partial(jax.jit, static_argnums=0)
    def apply(self, x):
        return x * self.scale

x = jnp.arange(4.0)
print(json.dumps({
    "square": square(x).tolist(),
    "method": Model().apply(x).tolist(),
    "grad": jax.grad(lambda v: square(v).sum())(x).tolist(),
    "vmap": jax.vmap(square)(jnp.ones((2, 3))).tolist(),
    "nested": jax.jit(lambda v: square(v) + 1)(x).tolist(),
    "lowered": "square" in square.lower(x).as_text(),
    "name": square.__name__,
    "signature": str(inspect.signature(square)),
}))
"""


def test_jitted_functions_behave_as_without_tpumem(tmp_path):
    """The script's output is its own; the JSON report (-f json) comes after it, on
    standard error, and keeps to its schema (checked in `profile`)."""
    (tmp_path / "jits.py").write_text(JIT_STILL_WORKS)
    plain = subprocess.run(
        [sys.executable, "jits.py"], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    profiled = profile(tmp_path, "-f", "json", "jits.py")
    assert profiled.returncode == 0, profiled.stderr[-3000:]
    assert last_json(profiled.stdout) == last_json(plain.stdout)
    assert last_json(plain.stdout)["square"] == [0.0, 1.0, 4.0, 9.0]
    assert printed_report(profiled.stderr)["framework"] == "jax"


SESSIONS = """
import json, time
import jax, jax.numpy as jnp
from tpumem.adapters.jax.adapter import _JaxSessions
from tpumem.adapters.profiler_chunks import ProfilerChunks
from tpumem.trace.records import encode
from tpumem.trace.writer import TraceWriter

with TraceWriter("chunks.tpumem", {"framework": "jax"}) as writer:
    chunks = ProfilerChunks(writer, _JaxSessions(), 0.2)
    chunks.start()
    # At least 1.2 s, and on a loaded machine until four sessions have been read.
    start = time.time()
    while time.time() < start + 1.2 or (chunks.stats.chunks < 4 and time.time() < start + 30):
        (jnp.ones((64, 64)) @ jnp.ones((64, 64))).block_until_ready()
    chunks.stop()
    print(json.dumps({"stats": encode(chunks.stats.as_metadata(0.2)), "warnings": chunks.warnings}))
"""


def test_jax_profiler_sessions_run_back_to_back(tmp_path):
    """The GPU path's capture, on the CPU: sessions rotate and every one is read
    (the CPU's have no memory events; the GPU's BFC events go the same way)."""
    (tmp_path / "sessions.py").write_text(textwrap.dedent(SESSIONS))
    result = subprocess.run(
        [sys.executable, "sessions.py"], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    printed = last_json(result.stdout)
    stats = printed["stats"]
    assert printed["warnings"] == []
    assert stats["chunks"] >= 4 and stats["gaps"] == stats["chunks"] - 1
    # Sessions of 0.2 s, each followed by JAX's own stop and export: on a loaded
    # 2-core machine (a CI run) that gap can be as long as the session (0.44 seen).
    assert 0.25 < stats["covered_fraction"] <= 1.0
    gaps = load(tmp_path / "chunks.tpumem").table.column("text").to_pylist()
    assert gaps.count("capture gap") == stats["gaps"]
    assert 0 < stats["gap_max_ns"] <= stats["gap_total_ns"]


LIVE_ARRAYS = """
import json
import numpy as np
import jax
arrays = [jax.device_put(np.ones((256, 256), np.float32)) for _ in range(5)]
doubled = [a * 2 for a in arrays]
live = jax.live_arrays()
print(json.dumps({"live": len(live), "bytes": sum(a.nbytes for a in live)}))
"""


def test_live_arrays_answers_as_without_tpumem(tmp_path):
    """Reading a buffer's address makes JAX keep a per-device array object with
    each array; jax.live_arrays() leaves them out while tpumem records, so a
    script that counts or sizes its live arrays gets what it gets without it."""
    (tmp_path / "live.py").write_text(LIVE_ARRAYS)
    plain = run_plain(tmp_path, "live.py")
    result = profile(tmp_path, "--full", "live.py")
    assert plain.returncode == 0 and result.returncode == 0, result.stderr[-3000:]
    assert last_json(result.stdout) == last_json(plain.stdout)
    book = load(tmp_path / "live.tpumem").metadata.extra.buffer_book
    assert book.shard_arrays_listed >= 5 and book.shard_arrays_hidden
    assert "jax.live_arrays() left them out" in " ".join(result.stderr.split())


HOST_ARGUMENT = """
import json
import numpy as np
import jax
batch = np.ones((16, 1024, 1024), np.float32)  # 64 MiB, on the host
print(json.dumps({"sum": float(jax.jit(lambda x: x.sum())(batch))}))
"""


def test_a_numpy_argument_is_on_the_device_while_its_call_runs(tmp_path):
    """JAX copies a NumPy argument of a jitted call to the device (every script's
    training batch): the copy is live while the call runs."""
    (tmp_path / "host.py").write_text(HOST_ARGUMENT)
    result = profile(tmp_path, "host.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert last_json(result.stdout) == {"sum": 16.0 * 1024 * 1024}
    (device,) = analyze(load(tmp_path / "host.tpumem")).devices
    assert 64 * MiB <= device.peak.bytes <= 64 * MiB + SMALL_ARRAYS
    (group,) = [g for g in device.peak.groups if g.bytes >= 64 * MiB]
    assert group.source == f"host.py:{line_of(HOST_ARGUMENT, 'jax.jit')}"


# A training loop whose arrays die all the time: each death is heard of in a
# weakref callback of tpumem's book, where a SIGINT's handler often runs.
DYING_ARRAYS = """
import time
import jax, jax.numpy as jnp

params = {f"layer{i}": {"w": jnp.ones((64, 64)), "b": jnp.zeros(64)} for i in range(40)}

@jax.jit
def step(p):
    return jax.tree_util.tree_map(lambda a: a * 0.99 + 0.01, p)

print("ready", flush=True)
history, start = [], time.monotonic()
while time.monotonic() - start < 60:
    params = step(params)
    history = (history + [params])[-20:]
print("went on after the interrupt", flush=True)
"""


def test_an_interrupt_stops_a_jax_loop_under_profile(tmp_path):
    """A KeyboardInterrupt raised in a weakref or gc callback is one Python ignores:
    a SIGINT sent to tpumem (which passes it on) landed in the book's callback in
    5 of 8 runs, and the script ran on. Six runs, each interrupted at another
    moment: each stops as plain Python stops, exit status 130, nothing ignored."""
    (tmp_path / "loop.py").write_text(DYING_ARRAYS)
    for run in range(6):
        process = subprocess.Popen(
            [sys.executable, "-m", "tpumem", "profile", "-q", "-o", f"t{run}.tpumem", "loop.py"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            # SIGINT as a terminal's job has it: a suite started in the background
            # (`pytest &`, nohup) has it ignored, and tpumem keeps an ignored
            # signal ignored, as Python does (the run would go on, rightly).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            assert process.stdout is not None and process.stdout.readline() == "ready\n"
            time.sleep(0.5 + 0.3 * run)  # at another point of the loop each time
            process.send_signal(signal.SIGINT)
            out, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
        assert "went on" not in out and "Exception ignored" not in err, err[-2000:]
        assert process.returncode == 130, err[-2000:]
        assert load(tmp_path / f"t{run}.tpumem").metadata.exit.signal == signal.SIGINT


# A pool forked before the framework's import, ended with SIGTERM (Pool.terminate),
# then JAX imported in a thread of the script's.
FORKS_THEN_THREAD = """
import json, multiprocessing, threading, time

with multiprocessing.get_context("fork").Pool(2) as pool:
    pool.map(time.sleep, [0.1, 0.1])  # leaving `with` terminates it: SIGTERM each
made = {}

def work():
    import jax.numpy as jnp
    made["array"] = jnp.ones((256, 1024), jnp.float32).block_until_ready()

thread = threading.Thread(target=work)
thread.start()
thread.join()
print(json.dumps({"made": made["array"].nbytes}))
"""


def test_a_pool_forked_before_the_import_and_an_import_in_a_thread_are_recorded(tmp_path):
    """Until its trace's header is written the runner handles SIGTERM (a tpumem
    killed meanwhile leaves no empty file): a pool's children forked then, ended
    by SIGTERM, removed the parent's trace as theirs; and the handler put back
    from the thread that imported JAX raised ValueError (signals are the main
    thread's), which ended the recording and that thread. Both run as plain
    Python runs them, the array in the trace."""
    (tmp_path / "forks.py").write_text(FORKS_THEN_THREAD)
    result = profile(tmp_path, "-q", "-o", "forks.tpumem", "forks.py")
    assert result.returncode == 0, result.stderr[-3000:]
    made = last_json(result.stdout)["made"]
    (device,) = analyze(load(tmp_path / "forks.tpumem")).devices
    assert device.peak.bytes >= made == 1024 * 1024


def test_a_script_that_sets_xla_flags_after_importing_jax_keeps_xla_s_plans(tmp_path):
    (tmp_path / "late.py").write_text(
        textwrap.dedent(
            """
            import os
            import jax, jax.numpy as jnp
            os.environ["XLA_FLAGS"] = "--xla_cpu_enable_fast_math=false"  # (before a device)

            @jax.jit
            def step(w, x):
                return jnp.tanh(x @ w).sum()

            print(step(jnp.ones((512, 512)), jnp.ones((512, 512))))
            """
        )
    )
    result = profile(tmp_path, "--width", "200", "late.py")
    assert result.returncode == 0, result.stderr[-3000:]
    analysis = analyze(load(tmp_path / "late.tpumem"))
    (step,) = [p for p in analysis.compiled if p.short_name == "jit_step"]
    assert step.heap is not None  # the buffer assignment, from tpumem's dump
    assert any("the script set XLA_FLAGS itself" in w for w in analysis.warnings)
