"""The reference transformer (see model_config.py) in JAX, trained for a few steps
on random tokens.

python examples/jax_transformer.py --width 128 --layers 2 --heads 4 --seq 64
tpumem profile examples/jax_transformer.py --steps 50
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
import jax.numpy as jnp
from jax_common import Params, cross_entropy, dense, layer_norm, make_step, train
from model_config import parameter_count, parse_args

BLOCK = 16  # parameters per block: 2 norms x 2, q/k/v/out x 2, two MLP layers x 2


def attention(x: jax.Array, p: list[jax.Array], heads: int) -> jax.Array:
    batch, seq, width = x.shape
    q, k, v = (dense(x, p[i], p[i + 1]) for i in (0, 2, 4))

    def split(t: jax.Array) -> jax.Array:
        return t.reshape(batch, seq, heads, width // heads).transpose(0, 2, 1, 3)

    q, k, v = split(q), split(k), split(v)
    scores = q @ k.transpose(0, 1, 3, 2) / float((width // heads) ** 0.5)
    causal = jnp.tril(jnp.ones([seq, seq]))
    scores = jnp.where(causal > 0, scores, -1e9)
    out = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3)
    return dense(out.reshape(batch, seq, width), p[6], p[7])


def block(x: jax.Array, p: list[jax.Array], heads: int) -> jax.Array:
    x = x + attention(layer_norm(x, p[0], p[1]), p[2:10], heads)
    h = jax.nn.gelu(dense(layer_norm(x, p[10], p[11]), p[12], p[13]), approximate=True)
    return x + dense(h, p[14], p[15])


def build(args: argparse.Namespace) -> tuple[Any, list[jax.Array], jax.Array, jax.Array]:
    """The jitted train step, the parameters and one batch: what main() trains, and
    what a test compiles ahead of time for a TPU to check tpumem's --tpu."""
    draw = Params(args.seed)
    d = args.width
    params = [draw.weight(args.vocab, d), draw.weight(args.seq, d)]
    for _ in range(args.layers):
        params += draw.norm(d)
        for _ in range(4):
            params += draw.dense(d, d)
        params += draw.norm(d) + draw.dense(d, 4 * d) + draw.dense(4 * d, d)
    params += draw.norm(d) + draw.dense(d, args.vocab, bias=False)
    counted = sum(p.size for p in params)
    assert counted == parameter_count("transformer", args), counted
    tokens = jax.random.randint(
        jax.random.PRNGKey(args.seed + 1), [args.batch, args.seq + 1], 0, args.vocab
    )
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def loss_fn(params: list[jax.Array], inputs: jax.Array, targets: jax.Array) -> jax.Array:
        embed, positions = params[0], params[1]
        x = embed[inputs] + positions
        for layer in range(args.layers):
            x = block(x, params[2 + BLOCK * layer : 2 + BLOCK * (layer + 1)], args.heads)
        final = 2 + BLOCK * args.layers
        logits = dense(layer_norm(x, params[final], params[final + 1]), params[final + 2])
        return cross_entropy(logits, targets)

    return make_step(loss_fn), params, inputs, targets


def main() -> None:
    args = parse_args("transformer", __doc__)
    step, params, inputs, targets = build(args)
    print(f"JAX transformer: {sum(p.size for p in params):,} parameters")
    train("transformer", args, params, step, inputs, targets)


if __name__ == "__main__":
    main()
