"""Pieces the TensorFlow examples share: parameters, layers and Adam (Keras'),
written out so that the JAX and PyTorch/XLA examples can match them."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import tensorflow as tf
from model_config import BETAS, EPSILON, INIT_STDDEV, LEARNING_RATE, report


def weight(*shape: int) -> tf.Variable:
    return tf.Variable(tf.random.normal(shape, stddev=INIT_STDDEV))


def dense_params(inputs: int, outputs: int, bias: bool = True) -> list[tf.Variable]:
    return (
        [weight(inputs, outputs), tf.Variable(tf.zeros([outputs]))]
        if bias
        else [weight(inputs, outputs)]
    )


def norm_params(width: int) -> list[tf.Variable]:
    return [tf.Variable(tf.ones([width])), tf.Variable(tf.zeros([width]))]


def dense(x: tf.Tensor, w: tf.Variable, b: tf.Variable | None = None) -> tf.Tensor:
    # A 2-D matmul: TF's CPU einsum over batch dimensions is ~100x slower.
    y = tf.matmul(tf.reshape(x, [-1, x.shape[-1]]), w)
    y = tf.reshape(y, [*x.shape[:-1], w.shape[-1]])
    return y if b is None else y + b


def layer_norm(x: tf.Tensor, scale: tf.Variable, bias: tf.Variable) -> tf.Tensor:
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + 1e-5) * scale + bias


class Adam:
    """Keras' Adam over the examples' variables, as TensorFlow custom loops train
    (optax's and torch.optim's Adam, in the other examples)."""

    def __init__(self, params: list[tf.Variable]) -> None:
        import keras

        self.params = params
        beta1, beta2 = BETAS
        self.optimizer = keras.optimizers.Adam(
            learning_rate=LEARNING_RATE, beta_1=beta1, beta_2=beta2, epsilon=EPSILON
        )

    def apply(self, grads: list[tf.Tensor]) -> None:
        # An embedding's gradient, dense as in torch.
        self.optimizer.apply([tf.convert_to_tensor(g) for g in grads], self.params)


def memory_peak() -> int | None:
    """TensorFlow's own peak for the first accelerator, else the CPU (None where
    the allocator keeps no statistics: the CPU without TF_CPU_ALLOCATOR_USE_BFC)."""
    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    try:
        return int(tf.config.experimental.get_memory_info(devices[0].name)["peak"])
    except ValueError:
        return None


def train(
    model: str,
    args: argparse.Namespace,
    params: int,
    step: Callable[..., tf.Tensor],
    *batch: tf.Tensor,
) -> None:
    """Runs the training steps, each marked for profilers, and reports."""
    start = first = time.perf_counter()
    first_cpu = time.process_time()
    for number in range(args.steps):
        if number == 1:
            first = time.perf_counter()  # the first step also traces and optimizes
            first_cpu = time.process_time()
        if getattr(args, "no_step_marks", False):
            loss = step(*batch)
            continue
        with tf.profiler.experimental.Trace("train", step_num=number, _r=1):
            loss = step(*batch)
    report(
        "tensorflow",
        model,
        args,
        params=params,
        loss=float(loss),
        first_step_seconds=first - start,
        steps_seconds=time.perf_counter() - first,
        steps_cpu_seconds=time.process_time() - first_cpu,  # every thread of the process
        peak_bytes=memory_peak(),
    )
