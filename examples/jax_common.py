"""Pieces the JAX examples share, matching tf_common.py: parameters, layers, Adam
(optax's) and the training loop."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from model_config import BETAS, EPSILON, INIT_STDDEV, LEARNING_RATE, report


class Params:
    """Draws weights from one key, in the order the model asks for them."""

    def __init__(self, seed: int) -> None:
        self.key = jax.random.PRNGKey(seed)

    def weight(self, *shape: int) -> jax.Array:
        self.key, key = jax.random.split(self.key)
        return jax.random.normal(key, shape, jnp.float32) * INIT_STDDEV

    def dense(self, inputs: int, outputs: int, bias: bool = True) -> list[jax.Array]:
        w = self.weight(inputs, outputs)
        return [w, jnp.zeros([outputs], jnp.float32)] if bias else [w]

    @staticmethod
    def norm(width: int) -> list[jax.Array]:
        return [jnp.ones([width], jnp.float32), jnp.zeros([width], jnp.float32)]


def dense(x: jax.Array, w: jax.Array, b: jax.Array | None = None) -> jax.Array:
    y = x @ w
    return y if b is None else y + b


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(variance + 1e-5) * scale + bias


def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    log_probs = jax.nn.log_softmax(logits)
    return -jnp.take_along_axis(log_probs, labels[..., None], axis=-1).mean()


# optax's Adam: what Flax and plain-JAX trainers use (torch.optim.Adam's and
# Keras' Adam, in the other examples).
OPTIMIZER = optax.adam(LEARNING_RATE, b1=BETAS[0], b2=BETAS[1], eps=EPSILON)


def adam_init(params: list[jax.Array]) -> Any:
    return OPTIMIZER.init(params)


def make_step(loss_fn: Callable[..., jax.Array]) -> Callable[..., Any]:
    """One jitted training step; params and optimizer state are donated, so they
    are updated in place as TensorFlow's variables are."""

    def step(params: list[jax.Array], state: Any, *batch: jax.Array) -> Any:
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        updates, state = OPTIMIZER.update(grads, state, params)
        return optax.apply_updates(params, updates), state, loss

    return jax.jit(step, donate_argnums=(0, 1))


def memory_peak() -> int | None:
    """JAX's own peak for the first device (None on the CPU, which keeps none)."""
    stats = jax.devices()[0].memory_stats()
    return int(stats["peak_bytes_in_use"]) if stats else None


def train(
    model: str,
    args: argparse.Namespace,
    params: list[jax.Array],
    step: Callable[..., Any],
    *batch: jax.Array,
) -> None:
    """Runs the training steps, each marked for profilers, and reports."""
    counted = sum(p.size for p in params)
    state = adam_init(params)
    start = first = time.perf_counter()
    first_cpu = time.process_time()
    for number in range(args.steps):
        if number == 1:
            first = time.perf_counter()  # the first step also traces and compiles
            first_cpu = time.process_time()
        with jax.profiler.StepTraceAnnotation("train", step_num=number):
            params, state, loss = step(params, state, *batch)
    report(
        "jax",
        model,
        args,
        params=counted,
        loss=float(loss),
        first_step_seconds=first - start,
        steps_seconds=time.perf_counter() - first,
        steps_cpu_seconds=time.process_time() - first_cpu,  # every thread of the process
        peak_bytes=memory_peak(),
    )
