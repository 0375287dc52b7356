"""Writes a real TensorFlow CPU profile with at least 100k memory events: an eager
loop of small ops under TF's profiler, with the BFC CPU allocator."""

from __future__ import annotations

import os
import sys

os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # the variables above must be set before TF starts


def main(logdir: str, steps: int) -> None:
    x = tf.random.normal([64, 64])
    tf.profiler.experimental.start(logdir)
    for _ in range(steps):
        y = x * 2.0 + 1.0
        x = tf.tanh(y)
    tf.profiler.experimental.stop()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
