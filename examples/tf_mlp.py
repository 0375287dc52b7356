"""The reference MLP (see model_config.py) in TensorFlow, trained for a few steps.

python examples/tf_mlp.py --width 512 --layers 4 --batch 64 --steps 20
tpumem profile examples/tf_mlp.py
"""

from __future__ import annotations

import tensorflow as tf
from model_config import parameter_count, parse_args
from tf_common import Adam, dense, dense_params, train


def main() -> None:
    args = parse_args("mlp", __doc__, jit_compile=True)
    tf.random.set_seed(args.seed)
    params = []
    for _ in range(args.layers):
        params += dense_params(args.width, args.width)
    params += dense_params(args.width, args.classes)
    counted = sum(int(tf.size(p)) for p in params)
    assert counted == parameter_count("mlp", args), counted
    print(f"TensorFlow MLP: {counted:,} parameters")
    optimizer = Adam(params)
    x = tf.random.normal([args.batch, args.width], stddev=1.0)
    y = tf.random.uniform([args.batch], maxval=args.classes, dtype=tf.int32)

    @tf.function(jit_compile=args.jit_compile)
    def train_step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            h = x
            for layer in range(args.layers):
                h = tf.nn.gelu(dense(h, params[2 * layer], params[2 * layer + 1]), approximate=True)
            logits = dense(h, params[-2], params[-1])
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            )
        optimizer.apply(tape.gradient(loss, params))
        return loss

    train("mlp", args, counted, train_step, x, y)


if __name__ == "__main__":
    main()
