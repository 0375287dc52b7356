"""The peak's kinds on TensorFlow come from the objects that hold its buffers
(adapters/tensorflow/variable_kinds.py): the variables a Keras model and its
optimizer keep, the sources a GradientTape differentiates against and the
gradients it returns, each read where its buffer is. Each script prints what its
own objects count; the report's kinds must say the same."""

from __future__ import annotations

import pytest
from test_kinds_jax import KERAS_FIT, peak_kinds

# One profiler session for the whole run: TensorFlow's profiler is read in
# sessions, and a buffer made in the gap between two (a variable's new value,
# beside other work) is in use in no buffer seen, so of no kind. Each figure
# here is held to the script's own count, to the byte.
WHOLE = ("--chunk", "600")
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}

# The model of Keras' guide ("Writing a training loop from scratch") and what its
# own objects count.
MODEL = """
import os
os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np, tensorflow as tf, keras
model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(1024, activation="relu"),
                          keras.layers.Dense(10)])
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
data = (np.random.rand(512, 784).astype("float32"), np.random.randint(0, 10, 512))
"""
COUNTS = """
size = lambda vs: sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in vs)
print(json.dumps({"parameters": size(model.trainable_variables),
                  "optimizer_state": size(optimizer.variables), "copies": 1,
                  "gradients": size(model.trainable_variables)}))
"""

# The guide's custom loop, eager, on tf.data: no step marks; each optimizer
# update ends a step. A first step of 16 examples makes the optimizer's slots:
# the peak is a later step's (the first, before any update ended, begins at no
# mark, and which of the two holds more is the executor's order, beside other
# work).
LOOP = (
    MODEL
    + """
def train(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply(grads, model.trainable_weights)
train(data[0][:16], data[1][:16])
for x, y in tf.data.Dataset.from_tensor_slices(data).batch(128):
    train(x, y)
"""
    + COUNTS
)


@pytest.mark.parametrize(("name", "source"), [("keras_fit_tf", KERAS_FIT), ("tape_loop", LOOP)])
def test_variables_and_gradients_are_what_the_frameworks_objects_count(tmp_path, name, source):
    args = ["tensorflow"] if source is KERAS_FIT else []
    kinds, counts = peak_kinds(tmp_path, name, source, *args, env=QUIET, options=WHOLE)
    assert kinds.get("parameters") == counts["parameters"], kinds
    # All but the learning rate: a float32 scalar TensorFlow keeps outside the
    # allocator whose events the trace holds (its buffer is in no event).
    assert kinds.get("optimizer_state") == counts["optimizer_state"] - 4, (kinds, counts)
    if "gradients" in counts:
        assert kinds.get("gradients") == counts["gradients"], kinds
    assert sum(kinds.values()) == counts["peak"]
    assert kinds.get("not_told", 0) <= 0.05 * counts["peak"], kinds


# The guide's loop whose first batch is its largest (a whole epoch's 4096
# examples, then batches of 64): the peak is the first step's backward pass,
# before any update has ended a step.
FIRST_STEP = (
    MODEL.replace("rand(512,", "rand(4096,").replace("10, 512)", "10, 4096)")
    + """
for x, y in [data] + [(data[0][:64], data[1][:64])] * 2:
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply(grads, model.trainable_weights)
"""
    + COUNTS
)


def test_a_peak_in_a_loops_first_step_holds_its_activations(tmp_path):
    """The first step of a loop that numbers none begins where its GradientTape
    opened: the ops' outputs since then are its activations (before, with no
    mark to begin it, 90% of this peak was of no kind)."""
    kinds, counts = peak_kinds(tmp_path, "first_step", FIRST_STEP, env=QUIET, options=WHOLE)
    assert counts["step"] == 0
    assert kinds.get("parameters") == counts["parameters"], kinds
    # The hidden layer's values over 4096 examples, [4096,1024] float32 each
    # (its output, and the gradient flowing back through it), at the least.
    assert kinds.get("activations", 0) >= 2 * 4096 * 1024 * 4, kinds
    assert sum(kinds.values()) == counts["peak"]
    assert kinds.get("not_told", 0) <= 0.05 * counts["peak"], kinds


# The same loop with its step in a tf.function, as the TensorFlow guide writes it
# for speed: the tape and the optimizer run once, as the function traces.
STEP = """
@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply(grads, model.trainable_weights)
    return loss
"""
FUNCTION_LOOP = (
    MODEL
    + STEP
    + """
for x, y in tf.data.Dataset.from_tensor_slices(data).batch(128):
    train_step(x, y)
"""
    + COUNTS
)


def test_a_tf_function_step_is_marked_and_its_gradients_are_the_tapes(tmp_path):
    """Each call of the function that traced the tape's gradient is a step (the
    loop numbers none); the buffers the gradient's ops make are gradients."""
    kinds, counts = peak_kinds(tmp_path, "function_loop", FUNCTION_LOOP, env=QUIET, options=WHOLE)
    assert kinds.get("parameters") == counts["parameters"], kinds
    assert kinds.get("optimizer_state") == counts["optimizer_state"] - 4, (kinds, counts)
    assert 0 < kinds.get("gradients", 0) <= counts["parameters"], kinds
    assert counts["step"] is not None
    assert sum(kinds.values()) == counts["peak"]
    assert kinds.get("not_told", 0) <= 0.05 * counts["peak"], kinds


# The guide's own sizes: its peak is tf.data filling the shuffle buffer, before
# the first step.
GUIDE_SIZES = (
    """
import os
os.environ["KERAS_BACKEND"] = "tensorflow"
import numpy as np, tensorflow as tf, keras
inputs = keras.Input(shape=(784,))
x = keras.layers.Dense(64, activation="relu")(inputs)
x = keras.layers.Dense(64, activation="relu")(x)
model = keras.Model(inputs=inputs, outputs=keras.layers.Dense(10)(x))
optimizer = keras.optimizers.Adam(1e-3)
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
data = (np.random.rand(2048, 784).astype("float32"), np.random.randint(0, 10, 2048))
train = tf.data.Dataset.from_tensor_slices(data).shuffle(buffer_size=1024, seed=0).batch(64)
"""
    + STEP
    + """
for x, y in train:
    train_step(x, y)
print(json.dumps({"copies": 1}))
"""
)


def test_a_shuffle_buffer_is_the_input_pipelines(tmp_path):
    """What tf.data's iterator kernels allocate (the shuffle buffer's elements,
    each batch) is input (adapters/tensorflow/input_pipeline.py)."""
    kinds, counts = peak_kinds(tmp_path, "guide", GUIDE_SIZES, env=QUIET, options=WHOLE)
    assert kinds.get("inputs", 0) >= 1024 * 784 * 4, kinds
    assert kinds.get("not_told", 0) <= 0.05 * counts["peak"], kinds
