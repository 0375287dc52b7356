"""What the TPU tests' independent compiles need: a JAX process that compiles for
TPUs with JAX's own ahead-of-time API and the libtpu tpumem uses."""

from __future__ import annotations

import os
from pathlib import Path

from tpumem.tpu.compile import libtpu_path
from tpumem.trace.reader import load

# XLA's memory analysis as tpumem's rows name its fields (trace/tpu_rows.py).
MEMORY = ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "generated_code_bytes")
# For the tests' scripts (put before them): a compile's memory analysis, one JSON line.
PRINT_MEMORY = """
def print_memory(compiled):
    import json
    stats = compiled.memory_analysis()
    print(json.dumps({
        "argument_bytes": stats.argument_size_in_bytes,
        "output_bytes": stats.output_size_in_bytes,
        "alias_bytes": stats.alias_size_in_bytes,
        "temp_bytes": stats.temp_size_in_bytes,
        "generated_code_bytes": stats.generated_code_size_in_bytes,
    }))
"""


def aot_env() -> dict[str, str]:
    found = libtpu_path()
    assert found is not None, "libtpu is not installed: make setup puts it in .venv/libtpu"
    path = os.pathsep.join(p for p in (found, os.environ.get("PYTHONPATH", "")) if p)
    return {"JAX_PLATFORMS": "cpu", "PYTHONPATH": path, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}


# XLA:TPU's size of each array shape on one v5e chip: an identity program over it,
# compiled by JAX's own AOT path. Arguments: a JSON list of [dims, dtype].
ARRAY_SIZES = """
import json, sys
import jax, jax.numpy as jnp
from jax.experimental import topologies
from jax.sharding import SingleDeviceSharding
chip = topologies.get_topology_desc(
    platform="tpu", topology_name="v5e:1x1", chips_per_host_bounds=[1, 1, 1]
).devices[0]
sizes = []
for dims, dtype in json.loads(sys.argv[1]):
    spec = jax.ShapeDtypeStruct(tuple(dims), jnp.dtype(dtype), sharding=SingleDeviceSharding(chip))
    analysis = jax.jit(lambda x: x).lower(spec).compile().memory_analysis()
    sizes.append(analysis.argument_size_in_bytes)
print(json.dumps(sizes))
"""
_DTYPES = {
    "f32": "float32",
    "f64": "float64",
    "bf16": "bfloat16",
    "s32": "int32",
    "s64": "int64",
    "pred": "bool",
}


def entry_parameters(trace: Path, module: str) -> list[tuple[list[int], str]]:
    """The shapes of the program's parameters, as its framework handed it to XLA."""
    from tpumem.hlo.schema import parse_hlo_proto
    from tpumem.hlo.shapes import element_name
    from tpumem.trace.hlo_rows import hlo_rows

    for row in hlo_rows(load(trace)):
        hlo = parse_hlo_proto(row.input_data).hlo_module
        if hlo.name != module:
            continue
        (entry,) = [c for c in hlo.computations if c.id == hlo.entry_computation_id]
        parameters = sorted(
            (i for i in entry.instructions if i.opcode == "parameter"),
            key=lambda i: i.parameter_number,
        )
        return [
            (list(i.shape.dimensions), _DTYPES[element_name(i.shape.element_type)])
            for i in parameters
        ]
    raise AssertionError(f"no HLO of {module} in {trace}")
