"""A JAX training loop, version 2: jax_train_v1.py with one line more, `seen = []`,
and every batch kept in it, a leak that `tpumem diff` and `tpumem check` find,
with its line.

tpumem profile -o v1.tpumem examples/jax_train_v1.py
tpumem profile -o v2.tpumem examples/jax_train_v2.py
tpumem diff v1.tpumem v2.tpumem
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def loss(w: jax.Array, x: jax.Array) -> jax.Array:
    return jnp.mean((x @ w) ** 2)


@jax.jit
def step(w: jax.Array, x: jax.Array) -> jax.Array:
    return w - 0.01 * jax.grad(loss)(w, x)


def main() -> None:
    key = jax.random.PRNGKey(0)
    w = jax.random.normal(key, (1024, 1024)) * 0.01
    seen = []
    for i in range(16):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):  # tpumem's step marks
            x = jax.random.normal(jax.random.fold_in(key, i), (2048, 1024))
            w = step(w, x)
            seen.append(x)
    print(f"final weight sum {float(w.sum()):.3f}")


if __name__ == "__main__":
    main()
