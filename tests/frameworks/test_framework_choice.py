"""Which framework a run records, found as the runtime finds it: the recording
starts when the script imports the framework that holds its device memory, and
nothing of tpumem's or of a framework is loaded before the script asks for it.
Each run in its own processes, on the real frameworks."""

from __future__ import annotations

import json
import textwrap

from conftest import assert_one_line_error
from profiling import last_json, profile, run_plain
from tpumem.analysis import analyze
from tpumem.trace.reader import load

MiB = 1 << 20

# What the script has loaded at its first line, past the standard library.
FIRST_LINE = """\
import json, sys
loaded = sorted({m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names))
print(json.dumps({"loaded": loaded}))
"""


def test_nothing_is_loaded_before_the_script_asks(tmp_path):
    script = FIRST_LINE + "import jax.numpy as jnp\nx = jnp.ones((1024, 1024))\nprint('{}')\n"
    (tmp_path / "first.py").write_text(script)
    plain = run_plain(tmp_path, "first.py")
    profiled = profile(tmp_path, "first.py")
    assert profiled.returncode == 0, profiled.stderr[-3000:]
    before = json.loads(plain.stdout.splitlines()[0])["loaded"]
    under = json.loads(profiled.stdout.splitlines()[0])["loaded"]
    assert set(under) - set(before) <= {"tpumem"}, under  # the runner itself, stdlib only
    assert analyze(load(tmp_path / "first.tpumem")).metadata.framework == "jax"


KERAS_ON_JAX = """\
import os
os.environ["KERAS_BACKEND"] = "jax"
import numpy as np
import tensorflow as tf  # tf.data, as keras.io's examples feed their models
import keras

print("backend", keras.backend.backend())
model = keras.Sequential([keras.Input((512,)), keras.layers.Dense(2048), keras.layers.Dense(10)])
model.compile(optimizer="adam", loss="mse")
x = np.random.rand(256, 512).astype("float32")
y = np.random.rand(256, 10).astype("float32")
model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(64), epochs=1, verbose=0)
"""


def test_a_keras_script_that_picks_jax_in_its_first_line_trains_on_jax(tmp_path):
    """It imports tensorflow (for tf.data) before keras: the device memory is
    JAX's, and the script's own choice of backend stands."""
    (tmp_path / "keras_jax.py").write_text(KERAS_ON_JAX)
    result = profile(tmp_path, "keras_jax.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "backend jax" in result.stdout
    analysis = analyze(load(tmp_path / "keras_jax.tpumem"))
    assert analysis.metadata.framework == "jax"
    (device,) = analysis.devices
    # The first Dense layer's kernel (4 MiB), Adam's two moments of it, and its gradient.
    assert device.peak.bytes >= 4 * 4 * MiB


LIBRARY = """\
import importlib, importlib.util

def train():
    # Asked whether TensorFlow is installed, as libraries do: that starts nothing.
    importlib.util.find_spec("tensorflow")
    jnp = importlib.import_module("jax.numpy")
    kept = jnp.ones((4 * 1024 * 1024,), jnp.float32)  # 16 MiB
    return float(kept.sum())
"""


def test_a_framework_a_library_imports_is_recorded(tmp_path):
    """As the Hugging Face Trainer imports torch_xla: no import statement of the
    framework in the script, and availability checks on the way."""
    (tmp_path / "trainer_lib.py").write_text(LIBRARY)
    (tmp_path / "run.py").write_text("import trainer_lib\nprint(trainer_lib.train())\n")
    result = profile(tmp_path, "run.py")
    assert result.returncode == 0, result.stderr[-3000:]
    analysis = analyze(load(tmp_path / "run.tpumem"))
    assert analysis.metadata.framework == "jax"
    assert analysis.devices[0].peak.bytes >= 16 * MiB


def test_a_script_that_fails_before_its_framework_says_so(tmp_path):
    (tmp_path / "broken.py").write_text("x = (\n")
    result = profile(tmp_path, "broken.py")
    assert result.returncode == 1
    assert "SyntaxError" in result.stderr  # Python's own words, as without tpumem
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        "tpumem: error: broken.py ended with status 1 before it imported a framework: "
        "nothing was recorded"
    )
    assert not list(tmp_path.glob("*.tpumem"))


def test_plain_pytorch_on_the_cpu_is_recorded(tmp_path):
    """A plain PyTorch script on this machine (no CUDA device): it runs as it
    would, and its CPU allocator's tensors are the trace's (adapters/torch)."""
    (tmp_path / "cpu_torch.py").write_text(
        "import torch\nprint(int((torch.ones(4, 4) @ torch.ones(4, 4)).sum()))\n"
    )
    result = profile(tmp_path, "-q", "cpu_torch.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "64\n"
    analysis = analyze(load(tmp_path / "cpu_torch.tpumem"))
    assert analysis.metadata.framework == "torch"
    assert analysis.devices[0].peak.bytes == 3 * 64  # the two operands and the product


def test_a_script_without_a_framework_is_one_line(tmp_path):
    (tmp_path / "plain.py").write_text("print('hello')\n")
    result = profile(tmp_path, "plain.py")
    assert result.stdout == "hello\n"  # it ran, as it would have
    assert_one_line_error(result, "plain.py imported none of the frameworks")
    assert not list(tmp_path.glob("*.tpumem"))


def test_a_second_framework_is_said_not_recorded(tmp_path):
    script = textwrap.dedent(
        """\
        import jax.numpy as jnp
        kept = jnp.ones((1024, 1024))
        import tensorflow as tf
        print(tf.constant(1.0).numpy())
        """
    )
    (tmp_path / "both.py").write_text(script)
    result = profile(tmp_path, "both.py")
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load(tmp_path / "both.tpumem")
    assert trace.metadata.framework == "jax"
    assert any("also used tensorflow" in w for w in trace.metadata.warnings)


def test_the_framework_named_waits_for_its_import(tmp_path):
    """--framework tensorflow on a script that imports jax first (a utility) and
    TensorFlow after: TensorFlow is recorded."""
    script = textwrap.dedent(
        """\
        import jax
        import tensorflow as tf
        kept = tf.ones((1024, 1024))
        print(json.dumps({"ok": True}))
        """
    )
    (tmp_path / "tf_after.py").write_text("import json\n" + script)
    result = profile(tmp_path, "--framework", "tensorflow", "tf_after.py")
    assert result.returncode == 0, result.stderr[-3000:]
    assert last_json(result.stdout) == {"ok": True}
    assert load(tmp_path / "tf_after.tpumem").metadata.framework == "tensorflow"


def test_a_framework_whose_import_fails_leaves_the_script_its_own_error(tmp_path):
    """A broken install: the script catches the ImportError, as it would without
    tpumem, and goes on; the trace says what happened."""
    fake = tmp_path / "site" / "jax"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("broken on purpose")\n')
    (tmp_path / "guarded.py").write_text(
        "try:\n    import jax\nexcept ImportError as error:\n    print('no jax:', error)\n"
    )
    result = profile(tmp_path, "guarded.py", env={"PYTHONPATH": str(tmp_path / "site")})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == "no jax: broken on purpose\n"
    assert "Traceback" not in result.stderr
    warnings = load(tmp_path / "guarded.tpumem").metadata.warnings
    assert any("import of jax failed" in w and "broken on purpose" in w for w in warnings)


def test_a_child_forked_before_the_framework_does_not_write_the_parents_trace(tmp_path):
    script = textwrap.dedent(
        """\
        import os
        child = os.fork()
        if child == 0:
            import jax.numpy as jnp
            jnp.ones(8).block_until_ready()
            os._exit(0)
        os.waitpid(child, 0)
        import jax.numpy as jnp
        kept = jnp.ones((1024, 1024))
        print(os.getpid())
        """
    )
    (tmp_path / "forks.py").write_text(script)
    result = profile(tmp_path, "forks.py")
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load(tmp_path / "forks.tpumem")
    assert trace.complete and trace.metadata.pid == int(result.stdout.split()[-1])
    assert analyze(trace).devices[0].peak.bytes >= 4 * MiB
