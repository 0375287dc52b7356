"""`tpumem fit --sweep`: a sweep's compiles, kept for its later points.

A sweep runs the script once for each combination of its values, and a program
the combination does not change (the init, an evaluation step whose batch is not
swept) is the same program at every point. Its row and its outputs' shardings
are kept here under a hash of its lowered module, source locations included (the
rows' buffer assignment names the script's lines), the compiler options its jit
gave and the XLA flags the process compiles with (a point may set them), with the
slice and the chips it was compiled for; a later call of the same module reads
them rather than compiling it again. The directory is the sweep's own (`tpumem
fit` makes it and removes it), and its points run one after another: one writer
at a time. Nothing here may end the script's fit: a compile that cannot be kept
or read back is compiled as it is.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, replace
from typing import Any

from tpumem.adapters.jax.stand_ins import placed
from tpumem.trace.tpu_rows import TpuCompile, compile_row_text, read_tpu_row

SINGLE = ""  # an output on one chip, or where nothing decided: a leaf, not None
# What the process compiles with besides the module (the dump's own directory,
# a point's, taken out of XLA_FLAGS by the caller).
FLAGS = ("XLA_FLAGS", "LIBTPU_INIT_ARGS")


@dataclass(frozen=True, slots=True)
class Reused:
    """What a call takes from a compile: the outputs' shapes and shardings."""

    out_info: Any
    output_shardings: Any


def key(lowered: Any, topology: str, chips: int, dump: str) -> str | None:
    """The program's key: its lowered module's text, its jit's compiler options,
    the process's XLA flags (less `dump`, each point's own) and where it is
    compiled; None where one of them cannot be read."""
    try:
        text = lowered.as_text(debug_info=True)
        options = lowered._lowering.compile_args.get("compiler_options_kvs", ())
    except Exception:  # (a lowering JAX cannot print: compiled as it is)
        return None
    flags = [os.environ.get(name, "").replace(dump, "") for name in FLAGS]
    digest = hashlib.sha256(text.encode())
    digest.update(repr((sorted(map(repr, options)), flags, topology, chips)).encode())
    return digest.hexdigest()


def read(
    directory: str, name: str, lowered: Any, devices: list[Any]
) -> tuple[Any, TpuCompile] | None:
    """(Reused or None where XLA:TPU refused it, its row) of an earlier point's
    compile of the program; None where there was none, or it cannot be read."""
    import jax

    try:
        with open(os.path.join(directory, name + ".json")) as handle:
            kept = json.load(handle)
    except (OSError, ValueError):
        return None
    row = read_tpu_row(kept.get("row"))
    if not isinstance(row, TpuCompile):
        return None
    if row.error is not None:
        return None, row
    leaves, structure = jax.tree.flatten(lowered.out_info)
    shardings = kept.get("shardings")
    if not isinstance(shardings, list) or len(shardings) != len(leaves):
        return None
    try:
        made = [_sharding(s, devices) for s in shardings]
    except (KeyError, TypeError, ValueError):
        return None
    return Reused(lowered.out_info, jax.tree.unflatten(structure, made)), row


def write(directory: str, name: str, row: TpuCompile, compiled: Any) -> None:
    """The compile's row (and, where it compiled, its outputs' shardings), for
    the sweep's later points; nothing where a sharding cannot be written down or
    the directory cannot take it (a full disk)."""
    import jax

    kept = replace(row, outside_bytes=None, argument_regions=None)
    path = os.path.join(directory, name + ".json")
    try:
        shardings = None
        if compiled is not None:
            shardings = [_described(s) for s in jax.tree.leaves(compiled.output_shardings)]
        with open(path + ".part", "w") as handle:
            json.dump({"row": compile_row_text(kept), "shardings": shardings}, handle)
        os.replace(path + ".part", path)  # (whole or absent: a point may be killed)
    except (OSError, TypeError, ValueError):
        return


def _described(sharding: Any) -> Any:
    """A sharding as the next point rebuilds it over the same slice's devices."""
    import jax

    sharding = placed(sharding)
    if sharding is None:
        return SINGLE
    if not isinstance(sharding, jax.sharding.NamedSharding):
        raise ValueError(f"a sharding tpumem does not write down: {sharding!r}")
    mesh = sharding.mesh
    return {
        "devices": [int(d.id) for d in mesh.devices.flat],
        "shape": list(mesh.devices.shape),
        "axes": list(mesh.axis_names),
        # (Explicit axes, jax.make_mesh's, are part of what the next call lowers.)
        "types": [t.name for t in mesh.axis_types],
        "spec": [list(p) if isinstance(p, tuple) else p for p in sharding.spec],
        "memory_kind": sharding.memory_kind,
    }


def _sharding(described: Any, devices: list[Any]) -> Any:
    import jax
    import numpy as np

    if described == SINGLE:
        return SINGLE
    by_id = {int(d.id): d for d in devices}
    grid = np.array([by_id[i] for i in described["devices"]], dtype=object)
    types = tuple(jax.sharding.AxisType[t] for t in described["types"])
    mesh = jax.sharding.Mesh(
        grid.reshape(described["shape"]), tuple(described["axes"]), axis_types=types
    )
    spec = [tuple(p) if isinstance(p, list) else p for p in described["spec"]]
    return jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec(*spec), memory_kind=described["memory_kind"]
    )
