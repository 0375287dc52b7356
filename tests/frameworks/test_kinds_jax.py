"""The peak's kinds on JAX come from the frameworks' own objects in the pytrees
each jitted step returns (adapters/jax/tree_kinds.py), never from the words of
their names: each script prints what its own objects count (the model's
parameters, the optimizer's state) and the report's kinds must say the same."""

from __future__ import annotations

import json
import textwrap

import pytest

from conftest import run_tpumem
from profiling import profile, run_plain

# Each script trains a few steps without donating, so at its peak the step's
# inputs and its outputs are both live: two copies of parameters and optimizer
# state, where the printed counts are one. Names tell nothing: `carry`, `aux`.
OPTAX_PLAIN = """
import jax, jax.numpy as jnp, optax
carry = {"a": jax.random.normal(jax.random.PRNGKey(0), (512, 512)), "b": jnp.zeros((512,))}
tx = optax.adam(1e-3)
aux = tx.init(carry)
def loss(c, x):
    return jnp.mean((x @ c["a"] + c["b"]) ** 2)
@jax.jit
def update(carry, aux, x):
    value, g = jax.value_and_grad(loss)(carry, x)
    u, aux = tx.update(g, aux, carry)
    return optax.apply_updates(carry, u), aux, value
for i in range(4):
    carry, aux, value = update(carry, aux, jax.random.normal(jax.random.PRNGKey(i), (256, 512)))
size = lambda tree: sum(a.nbytes for a in jax.tree_util.tree_leaves(tree))
print(json.dumps({"parameters": size(carry), "optimizer_state": size(aux), "copies": 2}))
"""

NNX = """
import jax, jax.numpy as jnp, optax
from flax import nnx
class MLP(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(784, 512, rngs=rngs)
        self.bn = nnx.BatchNorm(512, rngs=rngs)
        self.l2 = nnx.Linear(512, 10, rngs=rngs)
    def __call__(self, x):
        return self.l2(nnx.relu(self.bn(self.l1(x))))
model = MLP(nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adam(1e-3), wrt=nnx.Param)
@nnx.jit
def train_step(model, optimizer, x, y):
    def loss_fn(model):
        return optax.softmax_cross_entropy_with_integer_labels(model(x), y).mean()
    loss, grads = nnx.value_and_grad(loss_fn)(model)
    optimizer.update(model, grads)
    return loss
for i in range(4):
    x = jax.random.normal(jax.random.PRNGKey(i), (128, 784))
    train_step(model, optimizer, x, jnp.zeros((128,), jnp.int32))
size = lambda tree: sum(a.nbytes for a in jax.tree_util.tree_leaves(tree))
print(json.dumps({
    "parameters": size(nnx.state(model, nnx.Param)),
    "optimizer_state": size(nnx.state(optimizer, nnx.optimizer.OptState)),
    "copies": 2,
}))
"""

LINEN = """
import jax, jax.numpy as jnp, optax
import flax.linen as nn
from flax.training import train_state
class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(10)(nn.relu(nn.BatchNorm(use_running_average=False)(nn.Dense(512)(x))))
class State(train_state.TrainState):
    batch_stats: dict
def create():
    v = Net().init(jax.random.PRNGKey(0), jnp.ones((1, 784)))
    return State.create(apply_fn=Net().apply, params=v["params"], tx=optax.adamw(1e-3),
                        batch_stats=v["batch_stats"])
@jax.jit
def step(st, x, y):
    def loss(p):
        out, new = st.apply_fn({"params": p, "batch_stats": st.batch_stats}, x,
                               mutable=["batch_stats"])
        return optax.softmax_cross_entropy_with_integer_labels(out, y).mean(), new
    (value, new), g = jax.value_and_grad(loss, has_aux=True)(st.params)
    return st.apply_gradients(grads=g).replace(batch_stats=new["batch_stats"]), value
st = create()
for i in range(4):
    st, value = step(st, jax.random.normal(jax.random.PRNGKey(i), (128, 784)),
                     jnp.zeros((128,), jnp.int32))
size = lambda tree: sum(a.nbytes for a in jax.tree_util.tree_leaves(tree))
print(json.dumps({"parameters": size(st.params), "optimizer_state": size(st.opt_state),
                  "copies": 2}))
"""

# Keras' fit() on the backend named by the first argument. TensorFlow starts
# Adam's slots of a variable on one shared buffer of zeros until the first update
# writes them: a first fit of small batches writes them, and the peak falls in
# the second, of batches far larger. (JAX's fit() donates its state: one copy.)
KERAS_FIT = """
import os, sys
os.environ["KERAS_BACKEND"] = sys.argv[1]
import numpy as np, keras
model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(1024, activation="relu"),
                          keras.layers.BatchNormalization(), keras.layers.Dense(10)])
model.compile(optimizer=keras.optimizers.Adam(1e-3), metrics=["accuracy"],
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
x = np.random.rand(2048, 784).astype("float32")
model.fit(x[:64], np.random.randint(0, 10, 64), batch_size=32, epochs=1, verbose=0)
model.fit(x, np.random.randint(0, 10, 2048), batch_size=1024, epochs=1, verbose=0)
size = lambda vs: sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in vs)
print(json.dumps({"parameters": size(model.trainable_variables),
                  "optimizer_state": size(model.optimizer.variables), "copies": 1}))
"""


def peak_kinds(
    tmp_path,
    name: str,
    source: str,
    *args: str,
    env: dict | None = None,
    options: tuple[str, ...] = (),
) -> tuple[dict, dict]:
    """The kinds at the peak (key -> bytes) and the script's own counts;
    `options`: tpumem profile's own."""
    script = tmp_path / f"{name}.py"
    script.write_text("import json\n" + textwrap.dedent(source))
    result = profile(tmp_path, *options, str(script), *args, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    counts = json.loads(result.stdout.strip().splitlines()[-1])
    report = run_tpumem("report", str(tmp_path / f"{name}.tpumem"), "--format", "json")
    assert report.returncode == 0, report.stderr
    (device,) = json.loads(report.stdout)["devices"]
    return {k["kind"]: k["bytes"] for k in device["kinds"]}, counts | {
        "peak": device["peak"]["bytes"],
        "step": device["peak"]["step"],
    }


@pytest.mark.parametrize(
    ("name", "source"),
    [("optax_plain", OPTAX_PLAIN), ("nnx", NNX), ("linen", LINEN), ("keras_jax", KERAS_FIT)],
)
def test_parameters_and_optimizer_state_are_what_the_frameworks_objects_count(
    tmp_path, name, source
):
    kinds, counts = peak_kinds(tmp_path, name, source, *(["jax"] if source is KERAS_FIT else []))
    # One copy, or two where the peak falls while a step that donates nothing
    # has made its new state and the old one is still the script's.
    copies = kinds.get("parameters", 0) // counts["parameters"]
    assert copies in (1, counts["copies"]), kinds
    assert kinds["parameters"] == copies * counts["parameters"], kinds
    assert kinds.get("optimizer_state") == copies * counts["optimizer_state"], kinds
    assert sum(kinds.values()) == counts["peak"]
    assert kinds.get("not_told", 0) <= 0.05 * counts["peak"], kinds


PREDICT = """
import os, sys
os.environ["KERAS_BACKEND"] = sys.argv[1]
import numpy as np, keras
model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64), keras.layers.Dense(10)])
model.compile(optimizer="adam", loss="mse")
data = np.random.rand(256, 64).astype("float32")
model.fit(data, np.random.rand(256, 10).astype("float32"), batch_size=32, epochs=1, verbose=0)
model.predict(np.random.rand(8192, 64).astype("float32"), batch_size=8192, verbose=0)
"""


@pytest.mark.parametrize("backend", ["jax", "tensorflow"])
def test_a_peak_in_predict_is_labelled_with_its_phase_not_a_step(tmp_path, backend):
    """Keras' predict() on a batch far larger than training's: the peak falls
    there, and the report says so rather than naming the last training step."""
    (tmp_path / "predict.py").write_text(textwrap.dedent(PREDICT))
    result = profile(tmp_path, "-q", "predict.py", backend, env={"TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = run_tpumem("report", str(tmp_path / "predict.tpumem"), "--format", "json")
    (device,) = json.loads(report.stdout)["devices"]
    assert device["peak"]["phase"] == "predict()" and device["peak"]["step"] is None
    text = run_tpumem("report", str(tmp_path / "predict.tpumem")).stdout
    assert ", in predict()" in text.splitlines()[1]


# A pytree class of the script's whose `__module__` is None (made at run time):
# reading the tree's objects failed on it, and the call raised under profile.
ODD_PYTREE = """
import jax, jax.numpy as jnp
from jax import tree_util
class Odd(tuple):
    pass
Odd.__module__ = None
tree_util.register_pytree_node(Odd, lambda o: (tuple(o), None), lambda _, c: Odd(c))
@jax.jit
def f(o, x):
    return Odd((o[0] * 2,)), x + 1
o, x = Odd((jnp.ones(3),)), jnp.ones(2)
for _ in range(4):
    o, x = f(o, x)
print(float(o[0].sum()), float(x.sum()))
"""


def test_a_pytree_the_reading_cannot_read_leaves_the_call_alone(tmp_path):
    (tmp_path / "odd.py").write_text(textwrap.dedent(ODD_PYTREE))
    plain = run_plain(tmp_path, "odd.py")
    profiled = profile(tmp_path, "-q", "odd.py")
    assert plain.returncode == profiled.returncode == 0, profiled.stderr[-2000:]
    assert profiled.stdout == plain.stdout
