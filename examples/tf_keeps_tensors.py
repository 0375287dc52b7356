"""Runs out of memory on purpose: keeps ever larger TensorFlow tensors, the
i-th 1024 x 256*i float32, until it has kept `--count` of them.

On the CPU, TensorFlow's allocator has no limit but the machine's; one set
in the environment makes the out-of-memory error a GPU or TPU run would meet:

TF_CPU_BFC_MEM_LIMIT_IN_MB=48 tpumem profile examples/tf_keeps_tensors.py
tpumem profile examples/tf_keeps_tensors.py --count 12   # fits; then --capacity
"""

from __future__ import annotations

import argparse

import tensorflow as tf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    args = parser.parse_args()
    kept = []
    for i in range(args.count):
        kept.append(tf.ones((1024, 256 * (i + 1)), tf.float32))
    print(f"kept {len(kept)} tensors")


if __name__ == "__main__":
    main()
