"""The anchor of fit_larger.py: the compiles `tpumem fit --search` makes for
examples/jax_llama_step.py on v5e:2x4, bare, with JAX's own ahead-of-time API in
one process: the init, then the step at batch 8, 16, 32, ... until XLA:TPU
refuses one (up to 64 times the first). Run with libtpu on the path and
JAX_PLATFORMS=cpu (fit_larger.py sets both)."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import topologies

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from jax_llama_step import build, parse_args

args = parse_args([])
devices = topologies.get_topology_desc(
    platform="tpu", topology_name="v5e:2x4", chips_per_host_bounds=[2, 4, 1]
).devices
model = build(devices, args)
key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)  # (made on the CPU)
with jax.default_device(devices[0]):
    model["init"].lower(key).compile()
state = jax.tree.map(
    lambda s, h: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=h),
    model["state_shape"](),
    model["state_sharding"],
)
batch = args.batch
while batch <= 64 * args.batch:
    tokens = jax.ShapeDtypeStruct((batch, args.seq), jnp.int32, sharding=model["batch_sharding"])
    try:
        model["step"].lower(state, tokens).compile()
    except Exception:  # (XLA:TPU's refusal, as fit meets it)
        print("refused at", batch)
        break
    print("compiled at", batch)
    batch *= 2
