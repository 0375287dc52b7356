"""The anchor of fit_vs_aot.py: examples/jax_llama_step.py's init and step
lowered from shapes and compiled by XLA:TPU for v5e:2x4 with JAX's own
ahead-of-time API, and nothing else. Run with libtpu on the path and
JAX_PLATFORMS=cpu (fit_vs_aot.py sets both)."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
from jax.experimental import topologies

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from jax_llama_step import build, parse_args

args = parse_args(sys.argv[1:])
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
tokens = jax.ShapeDtypeStruct((args.batch, args.seq), jnp.int32, sharding=model["batch_sharding"])
memory = model["step"].lower(state, tokens).compile().memory_analysis()
print("compiled", memory.argument_size_in_bytes, memory.temp_size_in_bytes)
