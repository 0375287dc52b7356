"""The script fit_search.py gives `tpumem fit`: a 62-layer MLP step of
f32[8192,8192] layers (15.5 GiB of parameters), which XLA:TPU refuses on one
v5e chip. fit_search_anchor.py compiles the same step from these functions."""

from __future__ import annotations

import argparse
import functools

import jax
import jax.numpy as jnp

WIDTH, BATCH = 8192, 128


def loss(params, x):
    for w in params:
        x = jnp.tanh(x @ w)
    return (x**2).mean()


def step(params, x, lr):
    grads = jax.grad(loss)(params, x)
    return [w - lr * g for w, g in zip(params, grads, strict=True)]


def init(layers: int) -> list:
    return [jnp.zeros((WIDTH, WIDTH), jnp.float32) for _ in range(layers)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=62)
    layers = parser.parse_args().layers
    train = jax.jit(functools.partial(step, lr=0.01))
    params = jax.jit(functools.partial(init, layers))()
    params = train(params, jnp.ones((BATCH, WIDTH), jnp.float32))
