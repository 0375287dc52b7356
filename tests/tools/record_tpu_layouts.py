"""Records how XLA:TPU itself lays arrays out: the bytes an array of each shape
and dtype takes as a jitted function's argument, compiled ahead of time for a
TPU topology with libtpu (no TPU needed). The padding estimator is tested
against what this writes (tests/data/tpu_layouts.json).

    pip install --target /tmp/libtpu libtpu
    PYTHONPATH=/tmp/libtpu JAX_PLATFORMS=cpu python tests/tools/record_tpu_layouts.py

libtpu prints warnings about TPU_WORKER_HOSTNAMES at start; they do no harm.
"""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import libtpu
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding

OUT = Path(__file__).resolve().parent.parent / "data" / "tpu_layouts.json"
TOPOLOGIES = ("v4:2x2x1", "v5e:2x2", "v5p:2x2x1", "v6e:2x2")
DTYPES = ("float32", "bfloat16", "float16", "int8", "uint8", "int32", "bool")
DIMS = (1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 17, 31, 64, 100, 127, 128, 129, 256, 500, 768, 1000, 1025)

# Buffers models are made of, named so a failure says which kind broke.
NAMED = {
    "conv kernel, PyTorch OIHW 3x3": ([256, 128, 3, 3], "float32"),
    "conv kernel, PyTorch OIHW 7x7 stem": ([64, 3, 7, 7], "float32"),
    "conv kernel, PyTorch OIHW 1x1": ([2048, 512, 1, 1], "bfloat16"),
    "conv kernel, Flax HWIO 3x3": ([3, 3, 128, 256], "float32"),
    "conv kernel, Keras HWIO 3x3 first layer": ([3, 3, 3, 32], "float32"),
    "embedding table": ([30522, 768], "float32"),
    "embedding table, bf16": ([50257, 1024], "bfloat16"),
    "attention scores [B,H,S,S]": ([8, 12, 512, 512], "bfloat16"),
    "attention heads [B,S,H,D]": ([8, 512, 12, 64], "bfloat16"),
    "attention heads, few [B,S,H,D]": ([4, 1000, 3, 40], "float32"),
    "token ids": ([32, 512], "int32"),
    "bias": ([3072], "float32"),
    "odd bias": ([1000], "float32"),
    "layer-norm scale": ([768], "bfloat16"),
    "batch-norm statistics": ([64], "float32"),
    "scalar step counter": ([], "int32"),
    "classifier head [D, classes]": ([2048, 10], "float32"),
    "mask": ([8, 1, 1, 512], "bool"),
}


def random_shapes(count: int, seed: int = 0) -> list[tuple[list[int], str]]:
    rng = random.Random(seed)
    shapes = []
    while len(shapes) < count:
        rank = rng.choice((0, 1, 1, 2, 2, 2, 3, 3, 4, 4, 5))
        dims = [rng.choice(DIMS) for _ in range(rank)]
        if math.prod(dims) <= 1 << 26:
            shapes.append((dims, rng.choice(DTYPES)))
    return shapes


def argument_bytes(device, dims: list[int], dtype: str) -> int:
    spec = jax.ShapeDtypeStruct(
        tuple(dims), jnp.dtype(dtype), sharding=SingleDeviceSharding(device)
    )
    compiled = jax.jit(lambda x: x).lower(spec).compile()
    return int(compiled.memory_analysis().argument_size_in_bytes)


def main() -> None:
    cases = [(name, dims, dtype) for name, (dims, dtype) in NAMED.items()]
    cases += [(None, dims, dtype) for dims, dtype in random_shapes(240)]
    records = [
        {"name": name, "shape": dims, "dtype": dtype, "bytes": {}} for name, dims, dtype in cases
    ]
    for topology in TOPOLOGIES:
        device = topologies.get_topology_desc(platform="tpu", topology_name=topology).devices[0]
        for record in records:
            record["bytes"][topology] = argument_bytes(device, record["shape"], record["dtype"])
        print(f"{topology}: {len(records)} shapes", file=sys.stderr)
    header = {
        "what": "argument_size_in_bytes of jit(lambda x: x) compiled for a TPU topology",
        "jax": jax.__version__,
        "libtpu": getattr(libtpu, "__version__", "?"),
    }
    lines = ",\n".join(json.dumps(record) for record in records)
    OUT.write_text(json.dumps(header)[:-1] + ', "records": [\n' + lines + "\n]}\n")
    print(f"wrote {OUT}: {len(records)} shapes", file=sys.stderr)


if __name__ == "__main__":
    main()
