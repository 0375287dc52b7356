"""Code of a run's programs that was lowered for the run's own platform, which
`--tpu` then compiles for the TPU as it is: the programs are what the framework
handed XLA on the CPU (the dump's HLO before XLA's optimizations), not what it
would hand XLA:TPU. Two marks of it are in that HLO:

- a custom call to a kernel of the CPU's (LAPACK's `lapack_sgetrf_ffi`, DUCC's
  FFT, a host callback's `xla_python_cpu_callback`): XLA:TPU has no such kernel,
  and the TPU's lowering calls another or none. Only those: other custom calls
  (Shardy's `xla.sdy.GlobalToLocalShape` of every shard_map, sharding marks) are
  every platform's;
- ops of a `lax.cond` branch (JAX's `cond/branch_N_fun` in their names) outside
  any `conditional`'s branches: a branch chosen as the program was lowered, which
  is what `lax.platform_dependent` (and Pallas kernels, splash attention) does.
  The TPU may choose another branch there, or the same (`jnp.diag` lowers per
  platform to one form on both): the report says it may differ.

`tpumem fit` has neither: the script lowers for the slice's own devices."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tpumem.analysis.compiled.program_heap import instruction_source
from tpumem.hlo.schema import HloError, parse_hlo_proto

# The CPU's own kernels, by their custom-call targets' names.
CPU_KERNEL = re.compile(r"^(lapack_|ducc_)|cpu", re.IGNORECASE)
# A lax.cond branch's ops, under a jit's name stack or at a nested jit's root.
BRANCH = re.compile(r"(^|/)cond/branch_[0-9]+_fun/")
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
    # Computations a conditional runs as its branches, and all they call: their
    # ops are a branch taken at run time, not one chosen at lowering.
    calls = {
        c.id: [called for i in c.instructions for called in i.called_computation_ids]
        for c in module.computations
    }
    pending = [
        called
        for c in module.computations
        for i in c.instructions
        if i.opcode == "conditional"
        for called in i.called_computation_ids
    ]
    branches: set[int] = set()
    while pending:
        computation = pending.pop()
        if computation not in branches:
            branches.add(computation)
            pending += calls.get(computation, [])
    found: dict[str, list[str]] = {}
    for computation in module.computations:
        for instruction in computation.instructions:
            what = _form(instruction, chosen=computation.id not in branches)
            if what is None:
                continue
            sources = found.setdefault(what, [])
            where, _ = instruction_source(instruction, module.stack_frame_index)
            if where and where not in sources and len(sources) < MAX_SOURCES:
                sources.append(where)
    return tuple(
        CpuForm(program_id, module.name, what, tuple(lines)) for what, lines in found.items()
    )


def _form(instruction: Any, chosen: bool) -> str | None:
    """What of the CPU's form the instruction is, if any; `chosen`: it lies
    outside every conditional's branches."""
    if instruction.opcode == "custom-call":
        target = instruction.custom_call_target
        return f"custom call {target}" if CPU_KERNEL.search(target) else None
    if chosen and BRANCH.search(instruction.metadata.op_name):
        return CHOSEN_BRANCH
    return None
