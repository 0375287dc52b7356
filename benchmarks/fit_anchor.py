"""The anchor of fit_vs_aot.py: examples/jax_llama_step.py's init and step
lowered from shapes and compiled by XLA:TPU for v5e:2x4 with JAX's own
ahead-of-time API, and nothing else. Run with libtpu on the path and
JAX_PLATFORMS=cpu (fit_vs_aot.py sets both)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import topologies

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
from jax_llama_step import build, parse_args


def initialised(args: Any, init: bool = True) -> tuple[dict, Any]:
    """The example's model for v5e:2x4, its init compiled (unless not `init`);
    (the model, its state's shapes with their shardings)."""
    devices = topologies.get_topology_desc(
        platform="tpu", topology_name="v5e:2x4", chips_per_host_bounds=[2, 4, 1]
    ).devices
    model = build(devices, args)
    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)  # (made on the CPU)
    if init:
        with jax.default_device(devices[0]):
            model["init"].lower(key).compile()
    state = jax.tree.map(
        lambda s, h: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=h),
        model["state_shape"](),
        model["state_sharding"],
    )
    return model, state


def tokens(model: dict, args: Any, batch: int) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((batch, args.seq), jnp.int32, sharding=model["batch_sharding"])


if __name__ == "__main__":
    args = parse_args(sys.argv[1:])
    model, state = initialised(args)
    compiled = model["step"].lower(state, tokens(model, args, args.batch)).compile()
    analysis = compiled.memory_analysis()
    print("compiled", analysis.argument_size_in_bytes, analysis.temp_size_in_bytes)
