"""Code of a run's programs that was lowered for the run's own platform, which
`--tpu` then compiles for the TPU as it is: the programs are what the framework
handed XLA on the CPU (the dump's HLO before XLA's optimizations), not what it
would hand XLA:TPU. Two marks of it are in that HLO:

- a custom call to a kernel of the CPU's (LAPACK's `lapack_sgetrf_ffi`, a host
  callback's `xla_python_cpu_callback`): XLA:TPU has no such kernel, and the
  TPU's lowering calls another or none;
- ops of a `lax.cond` branch (JAX's `cond/branch_N_fun` in their names) in a
  program without a `conditional`: a branch chosen as the program was lowered,
  which is what `lax.platform_dependent` (and Pallas kernels, splash attention)
  does, so the ops are the CPU's branch.

`tpumem fit` has neither: the script lowers for the slice's own devices."""

from __future__ import annotations

from dataclasses import dataclass

from tpumem.analysis.program_heap import instruction_source
from tpumem.hlo.schema import HloError, parse_hlo_proto

# Custom calls XLA itself defines for every platform (sharding and layout marks,
# host offloading, 64-bit splits): not the CPU's own.
EVERY_PLATFORM = frozenset(
    {
        "Sharding",
        "SPMDFullToShardShape",
        "SPMDShardToFullShape",
        "MoveToHost",
        "MoveToDevice",
        "annotate_device_placement",
        "LayoutConstraint",
        "TopK",
        "X64Combine",
        "X64SplitLow",
        "X64SplitHigh",
        "AllocateBuffer",
        "Pin",
        "Unpin",
    }
)
BRANCH_MARK = "/cond/branch_"
CHOSEN_BRANCH = "a branch chosen for the CPU as it was lowered (lax.platform_dependent)"
MAX_SOURCES = 3  # source lines named per form


@dataclass(frozen=True, slots=True)
class CpuForm:
    """Code of one program lowered in the CPU's form."""

    program_id: int | None
    program: str  # the module's name
    what: str  # `custom call NAME`, or CHOSEN_BRANCH
    sources: tuple[str, ...]  # file:line of its ops, first MAX_SOURCES


def cpu_forms(program_id: int | None, hlo: bytes) -> tuple[CpuForm, ...]:
    """The CPU's own code in one program (its HloProto before XLA's optimizations);
    none in an HloProto that does not parse."""
    try:
        module = parse_hlo_proto(hlo).hlo_module
    except HloError:
        return ()
    instructions = [i for c in module.computations for i in c.instructions]
    found: dict[str, list[str]] = {}
    branched = not any(i.opcode == "conditional" for i in instructions)
    for instruction in instructions:
        what = None
        if instruction.opcode == "custom-call":
            if instruction.custom_call_target not in EVERY_PLATFORM:
                what = f"custom call {instruction.custom_call_target}"
        elif branched and BRANCH_MARK in instruction.metadata.op_name:
            what = CHOSEN_BRANCH
        if what is None:
            continue
        sources = found.setdefault(what, [])
        where, _ = instruction_source(instruction, module.stack_frame_index)
        if where and where not in sources and len(sources) < MAX_SOURCES:
            sources.append(where)
    return tuple(
        CpuForm(program_id, module.name, what, tuple(lines)) for what, lines in found.items()
    )
