"""The anchor of fit_search.py: the compiles `tpumem fit` makes for the
62-layer MLP step on v5e:1x1, bare, with JAX's own AOT API in one process: the
init, the step (refused), the step on v5p:1x1x1 (fit's diagnostic compile), the
step donated (refused), the step donated with its parameters in bfloat16 (it
fits). Prints nothing but the seconds it took, as JSON."""

from __future__ import annotations

import functools
import json
import time

start = time.perf_counter()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.experimental import topologies  # noqa: E402
from jax.sharding import SingleDeviceSharding  # noqa: E402

LAYERS = 62


def loss(params, x):
    for w in params:
        x = jnp.tanh(x @ w)
    return (x**2).mean()


def step(params, x, lr):
    grads = jax.grad(loss)(params, x)
    return [w - lr * g for w, g in zip(params, grads, strict=True)]


def chip(name: str, dims: list[int]) -> SingleDeviceSharding:
    device = topologies.get_topology_desc(
        platform="tpu", topology_name=name, chips_per_host_bounds=dims
    ).devices[0]
    return SingleDeviceSharding(device)


def compiled(fun, *args) -> bool:
    try:
        fun.lower(*args).compile()
    except Exception:  # (XLA:TPU's refusal, as fit meets it)
        return False
    return True


v5e, v5p = chip("v5e:1x1", [1, 1, 1]), chip("v5p:1x1x1", [1, 1, 1])
init = jax.jit(
    lambda: [jnp.zeros((8192, 8192), jnp.float32) for _ in range(LAYERS)], out_shardings=v5e
)
compiled(init)
for on, dtype, donate in (
    (v5e, jnp.float32, ()),
    (v5p, jnp.float32, ()),
    (v5e, jnp.float32, ("params",)),
    (v5e, jnp.bfloat16, ("params",)),
):
    params = [jax.ShapeDtypeStruct((8192, 8192), dtype, sharding=on)] * LAYERS
    x = jax.ShapeDtypeStruct((128, 8192), jnp.float32, sharding=on)
    train = jax.jit(functools.partial(step, lr=0.01), donate_argnames=donate)
    compiled(train, params, x)
print(json.dumps({"seconds": time.perf_counter() - start}))
