"""Training steps found where the framework or library marks them, for loops with no
step annotation of their own: Keras' fit() on JAX, a Flax/optax-style jitted step
that donates its state; and where nothing marks them, the report says how to.
Each run in its own processes, on the real frameworks."""

from __future__ import annotations

import textwrap

import numpy as np

from profiling import profile
from tpumem.analysis import analyze
from tpumem.trace.reader import load

DONATING_STEP = textwrap.dedent(
    """
    import functools
    import jax, jax.numpy as jnp

    @functools.partial(jax.jit, donate_argnums=0)
    def train_step(params, batch):
        grads = jax.grad(lambda p: jnp.mean((batch @ p["w"]) ** 2))(params)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)

    @jax.jit
    def evaluate(params, batch):  # does not donate: not a step
        return jnp.mean(batch @ params["w"])

    params = {"w": jnp.ones((256, 256))}
    for step in range(8):
        batch = jnp.ones((64, 256)) * step
        params = train_step(params, batch)
        evaluate(params, batch)
    print(float(evaluate(params, batch)))
    """
)


def test_a_jitted_step_that_donates_its_state_marks_the_steps(tmp_path):
    (tmp_path / "loop.py").write_text(DONATING_STEP)
    result = profile(tmp_path, "loop.py")
    assert result.returncode == 0, result.stderr[-3000:]
    analysis = analyze(load(tmp_path / "loop.tpumem"))
    assert analysis.steps == 8
    (device,) = analysis.devices
    assert device.growth is not None and not device.growth.growing
    assert "Growth across steps" in result.stderr and "not checked" not in result.stderr


# An evaluation that donates too, run before the first training step (as Flax
# trainers evaluate at step 0): the step is the function whose outputs hold
# optimizer state (optax's), from its second call, when that is known.
EVALUATES_FIRST = textwrap.dedent(
    """
    import functools
    import jax, jax.numpy as jnp, optax

    opt = optax.adam(1e-3)

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def train_step(params, state, batch):
        grads = jax.grad(lambda p: jnp.mean((batch @ p["w"]) ** 2))(params)
        updates, state = opt.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    @functools.partial(jax.jit, donate_argnums=1)
    def evaluate(params, batch):
        return jnp.mean(batch @ params["w"]), batch + 1

    params = {"w": jnp.ones((256, 256))}
    state = opt.init(params)
    batch = jnp.ones((64, 256))
    for step in range(9):
        if step % 4 == 0:
            loss, batch = evaluate(params, batch)
        params, state = train_step(params, state, batch)
    print(float(loss))
    """
)


def test_the_step_is_the_function_that_returns_optimizer_state(tmp_path):
    (tmp_path / "loop.py").write_text(EVALUATES_FIRST)
    result = profile(tmp_path, "-q", "loop.py")
    assert result.returncode == 0, result.stderr[-3000:]
    trace = load(tmp_path / "loop.tpumem")
    marks = [t for t in trace.texts_at(np.flatnonzero(trace.valid("step"))) if t]
    # One evaluation before training began, then every training call but the first.
    assert marks == ["evaluate (donating jitted call)"] + ["train_step (donating jitted call)"] * 8


KERAS_FIT = textwrap.dedent(
    """
    import os
    os.environ["KERAS_BACKEND"] = "jax"
    import numpy as np
    import keras

    model = keras.Sequential([keras.Input((32,)), keras.layers.Dense(64), keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    x, y = np.random.rand(320, 32).astype("float32"), np.random.rand(320, 1).astype("float32")
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)  # 10 batches
    """
)


def test_keras_fit_on_jax_marks_its_batches(tmp_path):
    (tmp_path / "fit.py").write_text(KERAS_FIT)
    result = profile(tmp_path, "fit.py")
    assert result.returncode == 0, result.stderr[-3000:]
    analysis = analyze(load(tmp_path / "fit.tpumem"))
    assert analysis.framework == "jax"
    assert analysis.steps == 10  # Keras' batches, not its train_step's donating calls too
    assert "without compiling its step" not in result.stderr


def test_keras_training_op_by_op_is_said(tmp_path):
    """keras.io's ViT trains un-jitted (a layer of it cannot be compiled): the
    report says its arrays are each op's."""
    source = KERAS_FIT.replace('loss="mse")', 'loss="mse", jit_compile=False)')
    assert source != KERAS_FIT
    (tmp_path / "fit.py").write_text(source)
    result = profile(tmp_path, "fit.py")
    assert result.returncode == 0, result.stderr[-3000:]
    warnings = analyze(load(tmp_path / "fit.tpumem")).warnings
    assert any("Keras trained Sequential without compiling its step" in w for w in warnings)


def test_a_loop_nothing_marks_is_told_how_to_mark_it(tmp_path):
    (tmp_path / "plain.py").write_text(
        # (four calls of each program: too few to stand for steps)
        "import jax.numpy as jnp\nfor i in range(4):\n    x = jnp.ones((256, 256)) * i\n"
    )
    result = profile(tmp_path, "--width", "200", "plain.py")
    assert result.returncode == 0, result.stderr[-3000:]
    text = " ".join(result.stderr.split())
    assert "Growth across steps: not checked: no step marks (5 needed)" in text
    assert "mark each step with jax.profiler.StepTraceAnnotation" in text


# A user's own leak, with no step marks: one jitted step called 30 times, 1 MiB
# of each call's outputs kept in a list (the line that keeps them is 13).
LEAK = textwrap.dedent(
    """
    import jax, jax.numpy as jnp

    @jax.jit
    def step(x):
        y = jnp.tanh(x) * 2.0
        return y, y[:512].reshape(512, 512)

    x = jnp.ones((2048, 512), jnp.float32)
    history = []
    for i in range(30):
        x, keep = step(x)
        history.append(KEPT)
    print(len(history))
    """
)


def test_a_leak_without_step_marks_is_found_from_the_repeated_calls(tmp_path):
    (tmp_path / "leak.py").write_text(LEAK.replace("KEPT", "keep"))
    result = profile(tmp_path, "--width", "200", "leak.py")
    assert result.returncode == 0, result.stderr[-3000:]
    (device,) = analyze(load(tmp_path / "leak.tpumem")).devices
    growth = device.growth
    assert growth is not None and growth.growing and growth.calls_of == "step"
    assert abs(growth.per_step_bytes - (1 << 20)) < 64 * 1024  # 1 MiB kept a call
    assert growth.kept is not None and growth.kept.name == "history"
    assert growth.kept.arrays == 30 and growth.kept.line == "leak.py:13"
    text = " ".join(result.stderr.split())
    assert "steps: the 30 calls of step (no step marks)" in text
    change = text.split("What to change", 1)[1]
    # The leak comes first, with the line that keeps it.
    assert change.split()[1] == "MiB/step"
    assert "history (list, filled at leak.py:13) held 30 device arrays" in change

    # The change applied: a Python number kept instead, and nothing grows.
    (tmp_path / "fixed.py").write_text(LEAK.replace("KEPT", "float(keep[0, 0])"))
    result = profile(tmp_path, "fixed.py")
    assert result.returncode == 0, result.stderr[-3000:]
    (device,) = analyze(load(tmp_path / "fixed.tpumem")).devices
    assert device.growth is not None and not device.growth.growing
    assert "makes arrays that stay" not in result.stderr
