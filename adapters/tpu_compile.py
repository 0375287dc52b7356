"""Compiles a run's programs for a TPU topology with libtpu, on the CPU, ahead of
time: the process `tpumem ... --tpu` starts after the run (tpu/compile.py).

    python -m tpumem.adapters.tpu_compile REQUEST.json

Each program is the HLO its framework handed to XLA (the dump's
`before_optimizations` proto), turned into StableHLO and compiled by XLA:TPU for
the topology's first `partitions` chips, as JAX's own ahead-of-time path compiles
(a compile-only client: no TPU needed). XLA:TPU's memory analysis and the
optimized HloProto it dumps (the TPU buffer assignment) are written, one JSON
line per program, to the request's output file as soon as each is done, so a
killed compile keeps what it finished. The parent sets JAX_PLATFORMS=cpu and the
XLA dump before this process imports JAX.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from tpumem.hlo.schema import HloError, parse_hlo_proto
from tpumem.trace.tpu_rows import (
    MAX_ERROR,
    TpuCompile,
    TpuLayouts,
    compile_row_text,
    layouts_row_text,
    memory_fields,
)


def slice_devices(name: str, dims: list[int], slices: int = 1) -> list[Any]:
    """The compile-only devices of a topology (`slices` of it: a multislice job's)."""
    from jax.experimental import topologies

    more = {"num_slices": slices} if slices > 1 else {}
    # All chips on one host: libtpu's default host shape (2x2x1) does not divide
    # every topology (v5e:1x1), and one host is all a compile needs.
    return topologies.get_topology_desc(
        platform="tpu", topology_name=name, chips_per_host_bounds=dims, **more
    ).devices


def _options(devices: list[Any]) -> Any:
    import numpy as np
    from jax._src.lib import xla_client as xc

    options = xc.CompileOptions()
    options.num_replicas = 1
    options.num_partitions = len(devices)
    build = options.executable_build_options
    build.use_spmd_partitioning = len(devices) > 1
    # The HLO carries GSPMD shardings (JAX exports Shardy's as those too).
    build.use_shardy_partitioner = True
    options.device_assignment = xc.DeviceAssignment.create(
        np.array([d.id for d in devices]).reshape(1, len(devices))
    )
    return options


def optimized_dump(dump: str, seen: set[str], module: str | None = None) -> bytes | None:
    """The HloProto XLA:TPU dumped for the compile just done (its buffer
    assignment): the newest dump not `seen` before, of `module` where one is of it
    (other compiles may dump beside it: the CPU's, of a script's eager operations)."""
    found: list[tuple[float, str]] = []
    for entry in os.scandir(dump):
        if entry.name in seen:
            continue
        seen.add(entry.name)
        if entry.name.endswith(".after_optimizations.hlo.pb"):
            found.append((entry.stat().st_mtime, entry.name))
    mine = [f for f in found if module and f".{module}." in f[1]] or found
    if not mine:
        return None
    with open(os.path.join(dump, max(mine)[1]), "rb") as handle:
        return handle.read()


def _compile(
    topology: str, program: dict, devices: list[Any], dump: str, seen: set[str]
) -> Iterator[TpuCompile]:
    """The program compiled for the topology's first chips: its row; for a
    refusal, its row as soon as XLA:TPU refused (a diagnostic compile may take
    long, or die), then the diagnosis, where one was made."""
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax
    from jax._src.lib.mlir import ir

    partitions = int(program["partitions"])
    base = {"program_id": program["program_id"], "module": program["module"]}
    kind = devices[0].device_kind if devices else ""
    compiled = TpuCompile(topology=topology, partitions=partitions, device_kind=kind, **base)
    if partitions > len(devices):
        yield replace(
            compiled, error=f"it ran on {partitions} devices; the topology has {len(devices)}"
        )
        return
    chips = devices[:partitions]
    start = time.perf_counter()
    try:
        with open(program["hlo_file"], "rb") as handle:
            module = parse_hlo_proto(handle.read()).hlo_module
        donors = sorted({entry.parameter_number for entry in module.buffer_donor.entries})
        with mlir.make_ir_context():
            stablehlo = ir.Module.parse(_jax.mlir.hlo_to_stablehlo(module.SerializeToString()))
            _drop_copies(stablehlo)
            _donate(stablehlo, donors)
            try:
                stats = compile_on(stablehlo, chips).get_compiled_memory_stats()
            except (RuntimeError, ValueError) as error:
                # XLA's whole message: past its first line some libtpu releases list
                # the largest allocations of a program that does not fit.
                message = (str(error).strip() or type(error).__name__)[:MAX_ERROR]
                refused = replace(compiled, error=message, seconds=time.perf_counter() - start)
                yield refused
                diagnosis = diagnosed(refused, stablehlo, dump, seen)
                if diagnosis.diagnostic is not None:
                    yield diagnosis
                return
    except (HloError, OSError, RuntimeError, ValueError) as error:
        message = str(error).strip() or type(error).__name__
        yield replace(compiled, error=message[:MAX_ERROR], seconds=time.perf_counter() - start)
        return
    memory = memory_fields(stats)
    yield replace(
        compiled,
        memory=memory,
        seconds=time.perf_counter() - start,
        hlo=optimized_dump(dump, seen, program["module"]),
    )


def compile_on(stablehlo: Any, chips: list[Any]) -> Any:
    """XLA:TPU's executable of `stablehlo` partitioned over `chips`."""
    from jax._src.lib import xla_client as xc

    return chips[0].client.compile(
        stablehlo, executable_devices=xc.DeviceList(tuple(chips)), compile_options=_options(chips)
    )


def diagnosed(refused: TpuCompile, stablehlo: Any, dump: str, seen: set[str]) -> TpuCompile:
    """A program its slice refused (its row written before: this one, written
    after it, replaces it in the analysis), with the plan XLA:TPU makes for it on as many
    chips that hold more (tpu/topology.py: diagnostic_topology): what fills it,
    as near as XLA:TPU can show, its buffers and their source lines. Unchanged
    where XLA:TPU gave no figures (another error than its size), where no such
    slice exists, or where that refuses it too."""
    from tpumem.hlo.refusals import HBM, LISTED, refusal
    from tpumem.tpu.topology import diagnostic_topology

    # (What XLA dumped before it gave up is not a later compile's.)
    optimized_dump(dump, seen, refused.module)
    chips = refused.partitions
    larger = diagnostic_topology(chips, refused.topology.partition(":")[0])
    said = refusal(refused.error or "")
    if said is None or said.space != HBM or larger is None or LISTED in (refused.error or ""):
        # (A kernel's VMEM is no larger on a larger chip; XLA's words list what fills it.)
        return refused
    print(
        f"tpumem: {refused.module} does not fit {refused.topology}; compiling it for "
        f"{larger.name} to show what fills it",
        file=sys.stderr,
        flush=True,
    )
    try:
        devices = slice_devices(larger.name, list(larger.dims))
        executable = compile_on(stablehlo, devices[:chips])
    except (RuntimeError, ValueError):
        optimized_dump(dump, seen, refused.module)
        return refused
    hlo = optimized_dump(dump, seen, refused.module)
    if hlo is None:
        return refused
    return replace(refused, hlo=hlo, diagnostic=larger.name, flops=flops_of(executable))


def flops_of(executable: Any) -> float | None:
    """XLA's count of a compiled program's floating-point operations per chip
    (None where its cost analysis gives none)."""
    try:
        analysis = executable.cost_analysis()
    except Exception:  # (not every backend analyses cost)
        return None
    if isinstance(analysis, list | tuple):
        analysis = analysis[0] if analysis else None
    flops = analysis.get("flops") if isinstance(analysis, dict) else None
    return float(flops) if isinstance(flops, int | float) and flops >= 0 else None


def name_of(stablehlo: Any) -> str | None:
    """The module's name, as XLA names the program (`jit_train_step`)."""
    from jax._src.lib.mlir import ir

    attributes = stablehlo.operation.attributes
    return ir.StringAttr(attributes["sym_name"]).value if "sym_name" in attributes else None


def partitions_of(stablehlo: Any) -> int | None:
    """The devices a JAX lowering partitions its program over (None where the
    module does not say: an HLO's, whose row names them)."""
    from jax._src.lib.mlir import ir

    attributes = stablehlo.operation.attributes
    if "mhlo.num_partitions" not in attributes:
        return None
    return ir.IntegerAttr(attributes["mhlo.num_partitions"]).value


def _drop_copies(module: Any) -> None:
    """Removes HLO copies: TensorFlow's bridge hands XLA `copy` instructions (of
    the returned values), StableHLO has no such op, and XLA:TPU refuses the
    `mhlo.copy` the conversion leaves ("failed to legalize operation 'mhlo.copy'").
    Before layouts are assigned a copy is the identity, which XLA's own
    simplifier removes too."""
    from jax._src.lib.mlir import ir

    copies = []

    def visit(op: Any) -> Any:
        if op.name == "mhlo.copy":
            copies.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    for op in copies:
        op.result.replace_all_uses_with(op.operands[0])
        op.erase()


def _donate(module: Any, donors: list[int]) -> None:
    """Marks the arguments the framework donated as JAX marks them: the HLO's
    buffer donors (how JAX donates sharded arguments) do not survive the turn into
    StableHLO, and without them XLA:TPU aliases no output to them."""
    if not donors:
        return
    from jax._src.lib.mlir import ir

    main = next(
        op
        for op in module.body.operations
        if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "main"
    )
    count = len(ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value).inputs)
    if "arg_attrs" in main.attributes:
        attrs = [ir.DictAttr(a) for a in ir.ArrayAttr(main.attributes["arg_attrs"])]
    else:
        attrs = [ir.DictAttr.get({}) for _ in range(count)]
    for number in donors:
        if number < len(attrs):
            # A DictAttr iterates by index (__len__, __getitem__), which its stub omits.
            named = {a.name: a.attr for a in attrs[number]}  # type: ignore[attr-defined]
            named["jax.buffer_donor"] = ir.BoolAttr.get(True)
            attrs[number] = ir.DictAttr.get(named)
    main.attributes["arg_attrs"] = ir.ArrayAttr.get(attrs)


def _layouts(name: str, arrays: list, device: Any) -> TpuLayouts:
    """Each array shape's bytes on one chip: the argument size XLA:TPU gives an
    identity program over it."""
    import jax
    from jax.sharding import SingleDeviceSharding

    start = time.perf_counter()
    sizes = {}
    where = SingleDeviceSharding(device)
    for dims, dtype in arrays:
        try:
            spec = jax.ShapeDtypeStruct(tuple(dims), dtype, sharding=where)
            compiled = jax.jit(lambda x: x).lower(spec).compile()
        except (RuntimeError, TypeError, ValueError):
            continue  # a dtype JAX does not know: left to the estimate
        analysis = compiled.memory_analysis()
        if analysis is None:  # (XLA:TPU analyses every program it compiles)
            continue
        sizes[tuple(dims), dtype] = analysis.argument_size_in_bytes
    return TpuLayouts(name, sizes, time.perf_counter() - start)


def main(request_path: str) -> int:
    with open(request_path) as handle:
        request = json.load(handle)
    name = request["topology"]
    devices = slice_devices(name, request["dims"])
    seen: set[str] = set()
    with open(request["out"], "a") as out:
        for program in request["programs"]:
            for compiled in _compile(name, program, devices, request["dump_dir"], seen):
                out.write(compile_row_text(compiled) + "\n")
                out.flush()
        if request["arrays"]:
            out.write(layouts_row_text(_layouts(name, request["arrays"], devices[0])) + "\n")
            out.flush()
        if request.get("measure_budget"):
            # After the programs: the probes' dumps are then never taken for a program's.
            from tpumem.adapters.tpu_budget import budget_row

            out.write(budget_row(name, devices[0], request.get("libtpu", "")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
