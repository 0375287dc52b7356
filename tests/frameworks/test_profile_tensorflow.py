"""`tpumem profile` on real TensorFlow scripts, each run in its own processes."""

from __future__ import annotations

import itertools
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from profiling import (
    BAD_ENDINGS,
    EXAMPLES,
    InATerminal,
    last_json,
    profile,
    profile_bad_ending,
    run_plain,
    until_written,
)
from tpumem.analysis import analyze
from tpumem.analysis.device_events import (
    capture_gaps,
    pair_events,
    split_by_device,
    step_marks,
)
from tpumem.trace.metadata import ExitStatus
from tpumem.trace.reader import load
from tpumem.trace.schema import SAMPLE

KNOWN_ALLOCATIONS = """
import json
import tensorflow as tf

print("the script's own output")
held = [tf.ones([1024, 256 * (i + 1)]) for i in range(4)]  # 1, 2, 3, 4 MiB
del held[0]
extra = tf.ones([2048, 1024])  # 8 MiB on top of 9 MiB
del extra
info = tf.config.experimental.get_memory_info("CPU:0")
print(json.dumps({"peak": info["peak"], "current": info["current"]}))
"""


def test_the_reported_peak_is_tensorflows_own(tmp_path):
    (tmp_path / "known.py").write_text(KNOWN_ALLOCATIONS)
    result = profile(tmp_path, "known.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith("the script's own output\n")  # passed through, untouched
    assert "tpumem report" in result.stderr and "What the peak is" in result.stderr
    tf_figures = last_json(result.stdout)
    analysis = analyze(load(tmp_path / "known.tpumem"))
    (device,) = analysis.devices
    assert device.device == "CPU:0" and device.fidelity == "allocator"
    assert device.peak.bytes == tf_figures["peak"]
    assert device.peak.bytes >= 17 * 2**20
    assert device.counters.reported_peak_bytes == tf_figures["peak"]
    assert analysis.metadata.exit == ExitStatus(code=0)
    assert analysis.metadata.env["TF_CPU_ALLOCATOR_USE_BFC"] == "true"
    assert analysis.metadata.set_by_tpumem == {"TF_CPU_ALLOCATOR_USE_BFC": "true"}
    shapes = {group.shape for group in device.peak.groups}
    assert {"[1024,512]", "[1024,768]", "[1024,1024]", "[2048,1024]"} <= shapes


@pytest.mark.parametrize(
    ("example", "sizes"),
    [
        ("tf_mlp.py", ["--width", "256", "--layers", "2", "--steps", "6"]),
        ("tf_transformer.py", ["--width", "64", "--layers", "1", "--seq", "32", "--steps", "6"]),
    ],
)
def test_the_examples_profile_end_to_end(tmp_path, example, sizes):
    result = profile(tmp_path, "-o", "run.tpumem", str(EXAMPLES / example), *sizes)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = last_json(result.stdout)
    assert printed["params"] > 0
    trace = load(tmp_path / "run.tpumem")
    analysis = analyze(trace)
    (device,) = analysis.devices
    # Every step is marked, the first included, though it spans profiler sessions.
    assert set(trace.numbers("step")[trace.valid("step")].tolist()) == set(range(6))
    # TF's running peak is in the trace; the events show it unless it was reached
    # between two profiler sessions, and then the analysis says so.
    assert device.counters.reported_peak_bytes == printed["peak_bytes"]
    missed = device.counters.peak_missed_by_events(device.peak.bytes)
    assert device.peak.bytes == printed["peak_bytes"] or missed
    assert device.peak.step is not None  # steps from tf.profiler.experimental.Trace
    assert device.fragmentation.check_agrees  # the address map, gaps and all
    assert analysis.metadata.capture.chunks >= 1
    assert list(analysis.metadata.command[1:]) == sizes
    # The counters are read between sessions (and once at the end), not while a
    # session records the allocator's every event: no reading lies well inside one.
    samples = np.sort(trace.numbers("time_ns")[trace.is_kind(SAMPLE)])
    gaps, edge = capture_gaps(trace), 50_000_000
    near_gap = [((gaps[:, 0] - edge <= t) & (t <= gaps[:, 1] + edge)).any() for t in samples]
    inside = [t for t, near in zip(samples[:-1], near_gap, strict=False) if not near]
    assert len(samples) >= 1 and not inside, (inside, gaps)


BEHAVES_AS_PYTHON = """
import json, os, sys
import tensorflow as tf
from helper import VALUE
from pkg.inner import NAME
print(json.dumps({
    "argv": sys.argv, "name": __name__, "file": __file__, "cwd": os.getcwd(),
    "path0": sys.path[0], "value": VALUE, "inner": NAME,
    "main": sys.modules["__main__"].__dict__ is globals(),
    "config_hidden": "TPUMEM_RUNNER_CONFIG" not in os.environ,
}))
"""


def test_the_script_sees_what_plain_python_gives_it(tmp_path):
    scripts = tmp_path / "scripts"
    (scripts / "pkg").mkdir(parents=True)
    (scripts / "helper.py").write_text("VALUE = 42\n")
    (scripts / "pkg" / "__init__.py").write_text("")
    (scripts / "pkg" / "inner.py").write_text("NAME = 'inner'\n")
    (scripts / "probe.py").write_text(BEHAVES_AS_PYTHON)
    args = ["scripts/probe.py", "--flag", "x y", "-o", "not-ours"]
    plain = run_plain(tmp_path, *args)
    profiled = profile(tmp_path, "-q", *args)
    assert profiled.returncode == 0, profiled.stderr[-3000:]
    assert last_json(profiled.stdout) == last_json(plain.stdout)
    seen = last_json(profiled.stdout)
    assert seen["argv"] == args[0:1] + args[1:] and seen["name"] == "__main__"
    assert seen["main"] and seen["config_hidden"] and seen["value"] == 42
    assert (tmp_path / "probe.tpumem").exists()  # default name, in the working directory


ENDINGS = {
    **BAD_ENDINGS,
    "exit": ("import sys; sys.exit(3)", 3, "exit status 3"),
    "oom": (
        "tf.ones([64, 1024, 1024])",  # 256 MiB against a 64 MiB allocator limit
        1,
        "Out of memory  in op Fill",  # (the answer says so: that is how it ended)
    ),
}
BEFORE_THE_END = (
    """
import time
import tensorflow as tf
kept = tf.ones([512, 1024])  # 2 MiB
"""
    + until_written()  # (a profiler chunk that holds it ends and is written)
    + """
{ending}
"""
)


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_run_that_ends_badly_keeps_its_trace(tmp_path, ending):
    result = profile_bad_ending(
        tmp_path,
        BEFORE_THE_END,
        ENDINGS[ending],
        "--chunk",
        "0.25",
        env={"TF_CPU_BFC_MEM_LIMIT_IN_MB": "64"},
    )
    if ending in ("exception", "oom"):
        assert "Traceback" in result.stderr and "adapters/runner" not in result.stderr
    trace = load(tmp_path / "bad.tpumem")
    (device,) = analyze(trace).devices
    assert device.peak.bytes >= 2 * 2**20
    shapes = {group.shape for group in device.peak.groups}
    assert "[512,1024]" in shapes


def test_ctrl_c_reaches_the_script(tmp_path):
    """Ctrl-C in the terminal (tpumem and the script in its foreground group): the
    script takes it once, as KeyboardInterrupt, and the trace says so."""
    (tmp_path / "waits.py").write_text(
        "import time\nimport tensorflow as tf\nx = tf.ones([256, 256])\n"
        "open('ready', 'w').close()\ntime.sleep(60)\n"
    )
    terminal = InATerminal(tmp_path, "profile", "waits.py")
    deadline = time.monotonic() + 120
    while not (tmp_path / "ready").exists():
        assert terminal.process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.3)
    terminal.press(b"\x03")  # Ctrl-C
    text = terminal.finish()
    child = terminal.process
    assert child.returncode == 128 + signal.SIGINT, text[-3000:]
    assert "KeyboardInterrupt" in text and "interrupted" in text
    assert load(tmp_path / "waits.tpumem").metadata.exit.exception == "KeyboardInterrupt"


def test_a_script_that_runs_tensorflows_profiler_keeps_its_profile(tmp_path):
    """tpumem hands the profiler over: the script's logdir gets its profile, and
    the trace still holds every chunk, the script's session included."""
    demo = EXAMPLES / "tf_profile_demo.py"
    result = profile(tmp_path, str(demo), "--logdir", "logdir", "--steps", "5")
    assert result.returncode == 0, result.stderr[-3000:]
    assert list((tmp_path / "logdir").glob("plugins/profile/*/*.xplane.pb"))
    analysis = analyze(load(tmp_path / "tf_profile_demo.tpumem"))
    (device,) = analysis.devices
    assert device.peak.bytes == last_json(result.stdout)["peak_bytes"]
    assert analysis.metadata.capture.chunks >= 2  # tpumem's, then the script's
    assert not analysis.warnings


THREADPOOL_LISTENER = """
import ctypes, json, os, time
import tensorflow as tf

library = ctypes.CDLL(os.path.join(os.path.dirname(tf.__file__), "libtensorflow_framework.so.2"))
listening = library["_ZN3tsl8profiler19threadpool_listener9IsEnabledEv"]
listening.restype = ctypes.c_bool
seen = {}
# A function's graph runs its ops as closures on TensorFlow's thread pools.
step = tf.function(lambda x: tf.reduce_sum(tf.nn.relu(x @ x) + tf.sin(x)))
step(tf.ones([256, 256]))
time.sleep(0.3)
seen["tpumem's session"] = listening()
tf.profiler.experimental.start("logdir")
seen["the script's session"] = listening()
step(tf.ones([256, 256]))
tf.profiler.experimental.stop()
time.sleep(0.3)
seen["tpumem's again"] = listening()
print(json.dumps(seen))
"""


def test_tpumems_sessions_leave_out_the_thread_pools_events(tmp_path):
    """TSL's thread-pool listener (three events a closure, no allocator events) is
    off while tpumem's sessions record, and on for the script's own session."""
    (tmp_path / "listener.py").write_text(THREADPOOL_LISTENER)
    result = profile(tmp_path, "listener.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert last_json(result.stdout) == {
        "tpumem's session": False,
        "the script's session": True,
        "tpumem's again": False,
    }
    (profile_file,) = (tmp_path / "logdir").glob("plugins/profile/*/*.xplane.pb")
    assert b"ThreadpoolListener::" in profile_file.read_bytes()


def test_a_module_runs_as_python_dash_m_runs_it(tmp_path):
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "__init__.py").write_text("")
    (tmp_path / "helper.py").write_text("VALUE = 42\n")
    (tmp_path / "scripts" / "pkg").mkdir()
    (tmp_path / "scripts" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "scripts" / "pkg" / "inner.py").write_text("NAME = 'inner'\n")
    probe = BEHAVES_AS_PYTHON.replace("from pkg.inner", "from scripts.pkg.inner")
    (tmp_path / "scripts" / "probe.py").write_text(probe)
    args = ["-m", "scripts.probe", "--flag", "x"]
    plain = run_plain(tmp_path, *args)
    profiled = profile(tmp_path, "-q", *args)
    assert profiled.returncode == 0, profiled.stderr[-3000:]
    seen = last_json(profiled.stdout)
    expected = last_json(plain.stdout)
    assert seen == expected
    assert seen["argv"][1:] == ["--flag", "x"] and seen["name"] == "__main__"
    assert list(load(tmp_path / "probe.tpumem").metadata.command) == args


KERAS_FIT = """
import numpy as np
import tensorflow as tf
layers = [tf.keras.Input((32,)), tf.keras.layers.Dense(64), tf.keras.layers.Dense(1)]
model = tf.keras.Sequential(layers)
model.compile(optimizer="adam", loss="mse")
x, y = np.zeros((40, 32), "float32"), np.zeros((40, 1), "float32")
model.fit(x, y, batch_size=8, epochs=2, verbose=0)
"""


def test_keras_fit_batches_are_the_steps(tmp_path):
    (tmp_path / "fit.py").write_text(KERAS_FIT)
    result = profile(tmp_path, "-q", "fit.py")
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load(tmp_path / "fit.tpumem")
    steps = trace.numbers("step")[trace.valid("step")]
    assert sorted(steps.tolist()) == list(range(10))  # 2 epochs of 5 batches
    assert analyze(trace).devices[0].peak.step is not None


CONVNET_FIT = """
import numpy as np
import keras
x = np.random.rand(6000, 28, 28, 1).astype("float32")
y = np.random.randint(0, 10, 6000)
model = keras.Sequential([
    keras.Input((28, 28, 1)),
    keras.layers.Conv2D(16, 3, activation="relu"),
    keras.layers.MaxPooling2D(),
    keras.layers.Flatten(),
    keras.layers.Dense(10),
])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=64, epochs=1, verbose=0)
"""


@pytest.fixture
def cpu_load():
    """Two busy processes on this 2-core machine, for as long as the test runs
    (and a minute at most)."""
    busy = "import time\nend = time.time() + 60\nwhile time.time() < end: pass"
    spinners = [subprocess.Popen([sys.executable, "-c", busy]) for _ in range(2)]
    yield
    for spinner in spinners:
        spinner.kill()
        spinner.wait()


def test_keras_fit_under_cpu_load_marks_every_hole_in_the_capture(tmp_path, cpu_load):
    """Every training batch outside a marked capture gap has its allocations in
    the trace, and the capture figures are the sessions' own."""
    (tmp_path / "fit.py").write_text(CONVNET_FIT)
    result = profile(tmp_path, "-q", "fit.py")
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load(tmp_path / "fit.tpumem")
    (events,) = split_by_device(trace)
    times, _ = step_marks(trace)
    gaps = capture_gaps(trace)
    assert len(times) == 94  # 6000 / 64 batches
    silent = []
    for begin, end in itertools.pairwise(times):
        in_gap = ((gaps[:, 0] < end) & (gaps[:, 1] > begin)).any()
        allocated = np.searchsorted(events.time_ns, end) > np.searchsorted(events.time_ns, begin)
        if not in_gap and not allocated:
            silent.append((begin, end))
    assert not silent, f"batches with no allocation events outside any capture gap: {silent}"
    capture = trace.metadata.capture
    covered_fraction = capture.covered_ns / (capture.covered_ns + capture.gap_total_ns)
    assert capture.covered_fraction == pytest.approx(covered_fraction, abs=1e-5)
    assert capture.gap_total_ns == int((gaps[:, 1] - gaps[:, 0]).sum())


def test_the_scripts_stderr_is_what_it_is_without_tpumem(tmp_path):
    """TensorFlow's profiler logs four INFO lines for every session tpumem runs
    (one a second): none of them reach the script's stderr, and every line the
    script and TensorFlow write does."""
    (tmp_path / "fit.py").write_text(
        KERAS_FIT + "import sys; print('to stderr', file=sys.stderr)\n"
    )
    verbose = {"TF_CPP_MIN_LOG_LEVEL": "0"}
    plain = run_plain(tmp_path, "fit.py", env={"TF_CPU_ALLOCATOR_USE_BFC": "true", **verbose})
    result = profile(tmp_path, "--chunk", "0.2", "fit.py", env=verbose)
    assert plain.returncode == 0 and result.returncode == 0, result.stderr[-3000:]
    script_part = result.stderr.split("tpumem report")[0]
    assert "Profiler session" not in script_part and "tpumem-thread" not in script_part
    assert "\0" not in result.stderr
    # The same lines as the plain run, less the time and thread of each log line.
    assert _without_stamps(script_part) == _without_stamps(plain.stderr)
    assert load(tmp_path / "fit.tpumem").metadata.capture.chunks >= 2  # sessions did run


def _without_stamps(text: str) -> list[str]:
    return sorted(
        re.sub(r"^([IWEF])\d{4} [\d:.]+ +\d+ ", r"\1 ", line) for line in text.splitlines()
    )


HOST_DATA = """
import numpy as np
import tensorflow as tf
inputs = np.ones((2048, 1024), np.float32)  # 8 MiB of host data
x = tf.constant(inputs)
y = tf.ones([1024, 1024]) * 2
raise RuntimeError("\\x1b[31mfailed\\x1b[0m to load\\nthe second line\\nthe third")
"""


def test_host_data_and_a_colourful_failure_are_reported_plainly(tmp_path):
    (tmp_path / "host.py").write_text(HOST_DATA)
    result = profile(tmp_path, "--width", "200", "host.py")
    assert result.returncode == 1, result.stderr[-3000:]
    report = result.stderr.split("tpumem report")[1]
    said = " ".join(report.split())  # (the answer's first rows: how it ended, one line)
    assert "Ended uncaught exception: RuntimeError: failed to load … (exit status 1)" in said
    assert "\x1b" not in report and "the second line" not in report
    (device,) = analyze(load(tmp_path / "host.tpumem")).devices
    copied = next(g for g in device.peak.groups if g.shape == "[2048,1024]")
    assert (copied.op, copied.region, copied.dtype, copied.source) == (
        "convert_to_tensor",
        "input",
        "float32",
        "host.py:5",
    )
    assert copied.bytes >= 8 * 2**20


# TensorFlow's default CPU allocator is oneDNN's where oneDNN is on (by default
# only on some x86 CPUs), and reports allocations; elsewhere it reports nothing.
@pytest.mark.parametrize("onednn", ["1", "0"], ids=["onednn-allocator", "plain-allocator"])
def test_without_the_bfc_cpu_allocator_the_report_says_what_there_is(tmp_path, onednn):
    (tmp_path / "host.py").write_text(HOST_DATA.rsplit("raise", 1)[0])
    env = {"TF_ENABLE_ONEDNN_OPTS": onednn}
    result = profile(tmp_path, "--no-cpu-allocator-events", "host.py", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    analysis = analyze(load(tmp_path / "host.tpumem"))
    (warning,) = [w for w in analysis.warnings if "TF_CPU_ALLOCATOR_USE_BFC" in w]
    assert "TF_CPU_ALLOCATOR_USE_BFC=true in the environment before TensorFlow starts" in warning
    if onednn == "1":
        (device,) = analysis.devices
        assert device.device == "CPU:0" and device.peak.bytes >= 12 * 2**20
        assert "reported its allocations" in warning and "no CPU memory figures" not in warning
    else:
        assert not analysis.devices or analysis.devices[0].peak.bytes == 0
        assert "reported no allocations" in warning and "no CPU memory figures" in warning
        assert "no CPU memory figures" in result.stderr


SETS_UP_TENSORFLOW = """
import json
import tensorflow as tf
# Allowed only before TensorFlow's runtime starts: tpumem must not start it first.
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
x = tf.ones([512, 512])
print(json.dumps({"logical": len(tf.config.list_logical_devices("CPU"))}))
"""


def test_the_script_sets_up_tensorflow_before_tpumem_touches_it(tmp_path):
    (tmp_path / "setup.py").write_text(SETS_UP_TENSORFLOW)
    result = profile(tmp_path, "setup.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert last_json(result.stdout) == {"logical": 2}
    analysis = analyze(load(tmp_path / "setup.tpumem"))
    assert analysis.backend == "cpu"
    assert [d.name for d in analysis.metadata.devices] == ["CPU:0", "CPU:1"]
    assert analysis.devices and analysis.devices[0].peak.bytes >= 512 * 512 * 4


WEIGHTS_THEN_FIT = """
import time
import numpy as np
import keras
model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(1024),
                          keras.layers.Dense(768), keras.layers.Dense(10)])
time.sleep(2.5)  # profiler sessions switch while the weights stay
model.compile(optimizer="adam", loss="mse")
x, y = np.zeros((256, 256), "float32"), np.zeros((256, 10), "float32")
model.fit(x, y, batch_size=64, epochs=1, verbose=0)
"""


def test_weights_made_before_a_capture_gap_are_live_at_the_peak_after_it(tmp_path):
    """The model's weights are made in the first profiler session, the peak comes
    in fit() after two or more gaps between sessions: the peak names the weights
    the trace saw made (before, the first gap dropped them as freed unseen)."""
    (tmp_path / "fit.py").write_text(WEIGHTS_THEN_FIT)
    result = profile(tmp_path, "-q", "fit.py", env={"KERAS_BACKEND": "tensorflow"})
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load(tmp_path / "fit.tpumem")
    (events,) = split_by_device(trace)
    peak = analyze(trace).devices[0].peak
    assert len(events.gaps_ns) >= 2 and peak.time_ns > events.gaps_ns[1, 1]
    unfreed = pair_events(events.is_alloc, events.buffer_id) < 0  # no free in the trace
    kept = events.row[events.is_alloc & unfreed]
    shape_codes, shapes = trace.codes("shape")
    source_codes, sources = trace.codes("source")
    made = {
        shapes[shape]
        for shape, source in zip(shape_codes[kept], source_codes[kept], strict=True)
        if shape >= 0 and source >= 0 and sources[source] == "fit.py:5"
    }
    kernels = {"[256,1024]", "[1024,768]", "[768,10]"} & made
    assert kernels, "the trace saw none of the weights made"
    at_peak = {g.shape for g in peak.groups if g.source == "fit.py:5"}
    assert kernels <= at_peak, (kernels, [(g.shape, g.source, g.bytes) for g in peak.groups])
