"""The reference MLP (see model_config.py) in JAX, trained for a few steps.

python examples/jax_mlp.py --width 512 --layers 4 --batch 64 --steps 20
tpumem profile examples/jax_mlp.py
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax_common import Params, cross_entropy, dense, make_step, train
from model_config import parameter_count, parse_args


def main() -> None:
    args = parse_args("mlp", __doc__)
    draw = Params(args.seed)
    params = []
    for _ in range(args.layers):
        params += draw.dense(args.width, args.width)
    params += draw.dense(args.width, args.classes)
    counted = sum(p.size for p in params)
    assert counted == parameter_count("mlp", args), counted
    print(f"JAX MLP: {counted:,} parameters")
    data_key, label_key = jax.random.split(jax.random.PRNGKey(args.seed + 1))
    x = jax.random.normal(data_key, [args.batch, args.width], jnp.float32)
    y = jax.random.randint(label_key, [args.batch], 0, args.classes)

    def loss_fn(params: list[jax.Array], x: jax.Array, y: jax.Array) -> jax.Array:
        h = x
        for layer in range(args.layers):
            h = jax.nn.gelu(dense(h, params[2 * layer], params[2 * layer + 1]), approximate=True)
        return cross_entropy(dense(h, params[-2], params[-1]), y)

    train("mlp", args, params, make_step(loss_fn), x, y)


if __name__ == "__main__":
    main()
