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
from fit_search_mlp import BATCH, WIDTH, init, step  # noqa: E402
from jax.experimental import topologies  # noqa: E402
from jax.sharding import SingleDeviceSharding  # noqa: E402

LAYERS = 62  # (fit_search_mlp.py's default)


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
made = jax.jit(functools.partial(init, LAYERS), out_shardings=v5e)
compiled(made)
for on, dtype, donate in (
    (v5e, jnp.float32, ()),
    (v5p, jnp.float32, ()),
    (v5e, jnp.float32, ("params",)),
    (v5e, jnp.bfloat16, ("params",)),
):
    params = [jax.ShapeDtypeStruct((WIDTH, WIDTH), dtype, sharding=on)] * LAYERS
    x = jax.ShapeDtypeStruct((BATCH, WIDTH), jnp.float32, sharding=on)
    train = jax.jit(functools.partial(step, lr=0.01), donate_argnames=donate)
    compiled(train, params, x)
print(json.dumps({"seconds": time.perf_counter() - start}))
