"""A small TensorFlow training loop profiled with TensorFlow's own profiler, on the
CPU: the profile `tpumem import` reads until `tpumem profile` exists.

TF_CPU_ALLOCATOR_USE_BFC=true makes TensorFlow's CPU allocator a BFC allocator,
which records MemoryAllocation/MemoryDeallocation events as on GPU and TPU.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

import tensorflow as tf  # the variable above must be set before TF starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--logdir", default="logdir")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--layers", type=int, default=3)
    args = parser.parse_args()

    # Profiling from before the model exists lets the trace see every buffer, so
    # the pool and the chunk map can be rebuilt from the allocator's events.
    tf.profiler.experimental.start(args.logdir)
    tf.random.set_seed(0)
    sizes = [args.width] * (args.layers + 1)
    weights = [
        tf.Variable(tf.random.normal([a, b], stddev=0.02), name=f"w{i}")
        for i, (a, b) in enumerate(itertools.pairwise(sizes))
    ]
    optimizer = tf.keras.optimizers.Adam(1e-3)
    x = tf.random.normal([args.batch, args.width])
    y = tf.random.normal([args.batch, args.width])
    for step in range(args.steps):
        with tf.profiler.experimental.Trace("train", step_num=step, _r=1):
            with tf.GradientTape() as tape:
                h = x
                for w in weights:
                    h = tf.nn.gelu(h @ w)
                loss = tf.reduce_mean((h - y) ** 2)
            grads = tape.gradient(loss, weights)
            optimizer.apply_gradients(zip(grads, weights, strict=True))
    tf.profiler.experimental.stop()
    info = tf.config.experimental.get_memory_info("CPU:0")
    print(json.dumps({"loss": float(loss), "peak_bytes": info["peak"]}))


if __name__ == "__main__":
    main()
