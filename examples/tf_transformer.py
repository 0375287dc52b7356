"""The reference transformer (see model_config.py) in TensorFlow, trained for a few
steps on random tokens.

    python examples/tf_transformer.py --width 128 --layers 2 --heads 4 --seq 64
    tpumem profile examples/tf_transformer.py --steps 50
"""

from __future__ import annotations

import tensorflow as tf
from model_config import parameter_count, parse_args
from tf_common import Adam, dense, dense_params, layer_norm, norm_params, train, weight


def attention(x: tf.Tensor, p: list[tf.Variable], heads: int) -> tf.Tensor:
    batch, seq, width = x.shape
    q, k, v = (dense(x, p[i], p[i + 1]) for i in (0, 2, 4))

    def split(t: tf.Tensor) -> tf.Tensor:
        return tf.transpose(tf.reshape(t, [batch, seq, heads, width // heads]), [0, 2, 1, 3])

    q, k, v = split(q), split(k), split(v)
    scores = tf.matmul(q, k, transpose_b=True) / float((width // heads) ** 0.5)
    causal = tf.linalg.band_part(tf.ones([seq, seq]), -1, 0)
    scores = tf.where(causal > 0, scores, tf.fill(tf.shape(scores), -1e9))
    out = tf.matmul(tf.nn.softmax(scores, axis=-1), v)
    out = tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [batch, seq, width])
    return dense(out, p[6], p[7])


def block(x: tf.Tensor, p: list[tf.Variable], heads: int) -> tf.Tensor:
    x = x + attention(layer_norm(x, p[0], p[1]), p[2:10], heads)
    h = tf.nn.gelu(dense(layer_norm(x, p[10], p[11]), p[12], p[13]), approximate=True)
    return x + dense(h, p[14], p[15])


def main() -> None:
    args = parse_args("transformer", __doc__, jit_compile=True)
    tf.random.set_seed(args.seed)
    d = args.width
    embed, positions = weight(args.vocab, d), weight(args.seq, d)
    blocks = []
    for _ in range(args.layers):
        blocks.append(
            norm_params(d)
            + [v for _ in range(4) for v in dense_params(d, d)]
            + norm_params(d)
            + dense_params(d, 4 * d)
            + dense_params(4 * d, d)
        )
    final_norm = norm_params(d)
    head = dense_params(d, args.vocab, bias=False)
    params = [embed, positions, *(p for b in blocks for p in b), *final_norm, *head]
    counted = sum(int(tf.size(p)) for p in params)
    assert counted == parameter_count("transformer", args), counted
    print(f"TensorFlow transformer: {counted:,} parameters")
    optimizer = Adam(params)
    tokens = tf.random.uniform([args.batch, args.seq + 1], maxval=args.vocab, dtype=tf.int32)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    @tf.function(jit_compile=args.jit_compile)
    def train_step(inputs: tf.Tensor, targets: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            x = tf.gather(embed, inputs) + positions
            for p in blocks:
                x = block(x, p, args.heads)
            logits = dense(layer_norm(x, *final_norm), head[0])
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
            )
        optimizer.apply(tape.gradient(loss, params))
        return loss

    train("transformer", args, counted, train_step, inputs, targets)


if __name__ == "__main__":
    main()
