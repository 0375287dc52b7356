"""A Llama-shaped train step (attention and a SwiGLU MLP per layer, RMS norms,
AdamW), FSDP over every device, each layer rematerialized: about 1B parameters
at its defaults. Written as a training script is: a mesh over jax.devices(), a
jitted init, the step jitted with its shardings and donated state, the loss read
after the steps. Far too large for this machine's CPU; made to be compiled for a
TPU slice without running:

    tpumem fit --tpu v5e-8 examples/jax_llama_step.py
    tpumem fit --tpu v5e-8 --sweep batch=8,32,128 --sweep remat=full,dots,none \
        examples/jax_llama_step.py

benchmarks/fit_anchor.py compiles the same two programs (`build`) with JAX's own
ahead-of-time API, the anchor for `tpumem fit`.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

POLICIES = {
    "none": None,
    "dots": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
    "full": jax.checkpoint_policies.nothing_saveable,
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="A Llama-shaped train step, FSDP.")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--ffn", type=int, default=5632)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=2048)
    # What each layer keeps for the backward pass: everything (none), its matrix
    # products (dots), or only its input (full: the rest recomputed).
    parser.add_argument("--remat", choices=sorted(POLICIES), default="full")
    return parser.parse_args(argv)


def build(devices: Sequence[Any], args: argparse.Namespace) -> dict[str, Any]:
    """The jitted init and step over `devices`, their shardings and shapes."""
    mesh = Mesh(np.array(devices), ("fsdp",))
    d, layers, ffn = args.width, args.layers, args.ffn
    shapes = {
        "embed": (args.vocab, d),
        "out": (d, args.vocab),
        "layers": {
            "qkv": (layers, d, 3 * d),
            "o": (layers, d, d),
            "up": (layers, d, 2 * ffn),
            "down": (layers, ffn, d),
            "norm": (layers, 2, d),
        },
    }

    def is_shape(value: Any) -> bool:
        return isinstance(value, tuple)

    def fsdp(shape: tuple[int, ...]) -> NamedSharding:
        # Every weight split along its largest dimension.
        spec: list[str | None] = [None] * len(shape)
        spec[int(np.argmax(shape))] = "fsdp"
        return NamedSharding(mesh, P(*spec))

    params_sharding = jax.tree.map(fsdp, shapes, is_leaf=is_shape)
    state_sharding = (params_sharding, params_sharding, params_sharding)
    batch_sharding = NamedSharding(mesh, P("fsdp", None))

    def init(key):
        leaves, tree = jax.tree.flatten(shapes, is_leaf=is_shape)
        keys = jax.random.split(key, len(leaves))
        params = [
            jax.random.normal(k, s, jnp.float32) * 0.02 for k, s in zip(keys, leaves, strict=True)
        ]
        params = jax.tree.unflatten(tree, params)
        return params, jax.tree.map(jnp.zeros_like, params), jax.tree.map(jnp.zeros_like, params)

    def norm(x, scale):
        return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * scale

    def layer(x, w):
        batch, seq, heads = x.shape[0], x.shape[1], args.heads
        q, k, v = jnp.split(norm(x, w["norm"][0]) @ w["qkv"], 3, axis=-1)
        q, k, v = (t.reshape(batch, seq, heads, d // heads) for t in (q, k, v))
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // heads)
        causal = jnp.tril(jnp.ones((seq, seq), bool))
        attention = jax.nn.softmax(jnp.where(causal, scores, -1e9), axis=-1)
        x = x + jnp.einsum("bhqk,bkhd->bqhd", attention, v).reshape(batch, seq, d) @ w["o"]
        gate, up = jnp.split(norm(x, w["norm"][1]) @ w["up"], 2, axis=-1)
        return x + (jax.nn.silu(gate) * up) @ w["down"], None

    def loss_fn(params, tokens):
        x = params["embed"][tokens]
        policy = POLICIES[args.remat]
        body = layer if policy is None else jax.checkpoint(layer, policy=policy)
        x, _ = jax.lax.scan(body, x, params["layers"])
        return -jax.nn.log_softmax(x @ params["out"])[..., 0].mean()

    def step(state, tokens):
        params, m, v = state
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
        m = jax.tree.map(lambda a, g: 0.9 * a + 0.1 * g, m, grads)
        v = jax.tree.map(lambda a, g: 0.999 * a + 0.001 * g * g, v, grads)
        params = jax.tree.map(lambda p, a, b: p - 1e-4 * a / (jnp.sqrt(b) + 1e-8), params, m, v)
        return (params, m, v), loss

    return {
        "init": jax.jit(init, out_shardings=state_sharding),
        "step": jax.jit(
            step,
            in_shardings=(state_sharding, batch_sharding),
            out_shardings=(state_sharding, NamedSharding(mesh, P())),
            donate_argnums=(0,),
        ),
        "state_shape": lambda: jax.eval_shape(init, jax.random.key(0)),
        "state_sharding": state_sharding,
        "batch_sharding": batch_sharding,
    }


def main() -> None:
    args = parse_args()
    model = build(jax.devices(), args)
    state = model["init"](jax.random.key(0))
    tokens = jax.device_put(np.zeros((args.batch, args.seq), np.int32), model["batch_sharding"])
    for _ in range(3):
        state, loss = model["step"](state, tokens)
    print("loss", float(loss))


if __name__ == "__main__":
    main()
