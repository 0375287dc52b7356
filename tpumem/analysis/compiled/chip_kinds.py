"""What one chip of a TPU topology holds for the run, by kind (`--tpu`): the
run's ledger (kinds.py) carried onto XLA:TPU's plan of the program counted
(tpu.py's TpuFit), so the kinds add up to the chip's need exactly.

- The program's buffers, from XLA:TPU's buffer assignment: each argument of the
  kind the run's ledger gave the same argument (by number), else by its fate
  (given back: state; not: an input); a new output of the kind of the argument
  of its shape it replaces, else a result (activations); the temporaries at the
  heap's peak, activations; a buffer's layout padding, the temporaries'
  allocation beyond their peak, the output tuple's table and the generated
  code, the framework's overhead; constants, not told.
- The run's arrays outside that program at its peak: the run's kinds less what
  the program held on the run's own backend, at the total tpu.py gives them in
  TPU layouts (each kind in the same proportion: the run's arrays are resized
  as a whole).
- `tpumem fit`: each argument of the kind the objects of the call's pytrees give
  it (adapters/jax/tree_kinds.py, written with the compile), by fate where none
  does; the stand-ins held beside the arguments, not told (nothing ran).
"""

from __future__ import annotations

from tpumem.analysis.compiled.program_heap import CONSTANT, OUTPUT, PARAMETER, ProgramHeap
from tpumem.analysis.compiled.programs import ProgramKinds, RunningAtPeak
from tpumem.analysis.compiled.tpu import BESIDE, TpuFit, TpuProgram, TpuTarget
from tpumem.analysis.kinds import (
    ACTIVATIONS,
    INPUTS,
    OTHER,
    OVERHEAD,
    STATE,
    KindBytes,
    Ledger,
    PeakKinds,
    region_kind,
)

ON_CHIP_ARGUMENT = "XLA:TPU's plan of the program's arguments, each of the kind the run gave it"
ON_CHIP_OBJECTS = (
    "XLA:TPU's plan of the program's arguments, each of the kind the script's objects give it"
)
ON_CHIP_FATE = "XLA:TPU's plan: an argument given back (state) or not (an input)"
ON_CHIP_OUTPUT = "XLA:TPU's plan of the program's outputs, each of the kind the run gave it"
ON_CHIP_REPLACING = "XLA:TPU's plan of the program's new values of arguments it does not donate"
ON_CHIP_RESULT = "XLA:TPU's plan of the program's results (no argument of their shape)"
ON_CHIP_TEMPS = "XLA:TPU's plan of the program's temporaries at their peak"
ON_CHIP_PADDING = "the TPU layouts' padding and the plan's bytes no value uses at its peak"
ON_CHIP_CODE = "the program's generated code"
ON_CHIP_CONSTANTS = "the program's constants (arrays it closes over)"
ON_CHIP_OUTSIDE = "the run's arrays outside the program at its peak, in TPU layouts"
ON_CHIP_BESIDE = "stand-ins the script held beside the program's arguments (nothing ran)"


class _ChipLedger(Ledger):
    def __init__(self) -> None:
        super().__init__()
        self.arguments: dict[int, str] = {}  # each argument's kind, by number


def chip_kinds(
    target: TpuTarget, run_kinds: PeakKinds | None, running: tuple[RunningAtPeak, ...]
) -> tuple[tuple[KindBytes, ...], tuple[str, ...]]:
    """A chip's need (target.fit) by kind, and the kind of each argument of the
    program counted, by number; () where XLA:TPU refused the program or planned
    none of it (no buffer assignment to read)."""
    fit = target.fit
    program = _counted(target, fit)
    if fit is None or program is None or program.heap is None:
        return (), ()
    ledger = _ChipLedger()
    at_peak = running[0] if fit.running_at_peak and running else None
    told = at_peak.kinds if at_peak is not None else _objects_said(program)
    if fit.running_at_peak or fit.arrays_label == BESIDE:
        how = ON_CHIP_ARGUMENT if at_peak is not None else ON_CHIP_OBJECTS
        _program_kinds(ledger, program.heap, told, how)
    else:  # no program ran at the peak: its working memory beside the run's arrays
        _temporaries(ledger, program.heap)
    ledger.add(OVERHEAD, program.code_bytes, ON_CHIP_CODE)
    if fit.arrays_label == BESIDE:
        ledger.add(OTHER, fit.arrays_bytes, ON_CHIP_BESIDE)
    else:
        outside = {k.kind: k.bytes for k in run_kinds.kinds} if run_kinds is not None else {}
        if at_peak is not None and at_peak.program.heap is not None:
            held = _ChipLedger()
            _program_kinds(held, at_peak.program.heap, told, temporaries=False)
            held.add(ACTIVATIONS, at_peak.temp_bytes, ON_CHIP_TEMPS)
            outside = {k: max(0, b - held.totals.get(k, 0)) for k, b in outside.items()}
        for kind, size in _shared(fit.arrays_bytes, outside).items():
            ledger.add(kind, size, ON_CHIP_OUTSIDE)
    numbers = range(max(ledger.arguments, default=-1) + 1)
    return ledger.kinds(), tuple(ledger.arguments.get(n, "") for n in numbers)


def _counted(target: TpuTarget, fit: TpuFit | None) -> TpuProgram | None:
    if fit is None or fit.refused is not None:
        return None
    return next((p for p in target.programs if p.name == fit.program), None)


def _objects_said(program: TpuProgram) -> ProgramKinds:
    """`tpumem fit`: each argument's kind as the script's objects tell it (the
    call's array arguments in order are the program's, where as many)."""
    regions = program.compile.argument_regions
    heap = program.heap
    if not regions or heap is None:
        return ProgramKinds()
    numbers = [b.parameter_number for b in heap.whole_values if b.group == PARAMETER]
    if len(regions) != max(numbers, default=-1) + 1:
        return ProgramKinds()
    return ProgramKinds(tuple(region_kind(r) or "" for r in regions))


def _program_kinds(
    ledger: _ChipLedger,
    heap: ProgramHeap,
    told: ProgramKinds,
    told_how: str = ON_CHIP_ARGUMENT,
    temporaries: bool = True,
) -> None:
    """A program's plan by kind: its whole-program buffers and (with
    `temporaries`) its temporaries, adding up to its allocations."""
    whole = list(heap.whole_values)
    # The kinds of the arguments no output takes the memory of, by shape: a
    # step that donates nothing gives back new values of them.
    replaced: dict[tuple[str, str], list[str]] = {}
    outputs = {shape: list(kinds) for shape, kinds in told.outputs.items()}
    for buffer in sorted(whole, key=lambda b: b.parameter_number):
        shape = (buffer.dtype, buffer.dims)
        if buffer.group == PARAMETER:
            number = buffer.parameter_number
            if 0 <= number < len(told.arguments) and told.arguments[number]:
                kind, how = told.arguments[number], told_how
            else:
                kind, how = (STATE if buffer.live_out else INPUTS), ON_CHIP_FATE
            ledger.arguments[number] = kind
            if not buffer.live_out:
                replaced.setdefault(shape, []).append(kind)
        elif buffer.group == OUTPUT and not buffer.dims:  # the output tuple's table
            ledger.add(OVERHEAD, buffer.allocation_bytes, ON_CHIP_PADDING)
            continue
        elif buffer.group == OUTPUT:
            made, given_back = outputs.get(shape), replaced.get(shape)
            if made:  # the run held it: its kind there
                kind, how = made.pop(0), ON_CHIP_OUTPUT
            elif given_back:
                kind, how = given_back.pop(0), ON_CHIP_REPLACING
            else:
                kind, how = ACTIVATIONS, ON_CHIP_RESULT
        elif buffer.group == CONSTANT:
            kind, how = OTHER, ON_CHIP_CONSTANTS
        else:
            continue
        value = min(buffer.unpadded_bytes, buffer.allocation_bytes)
        ledger.add(kind, value, how)
        ledger.add(OVERHEAD, buffer.allocation_bytes - value, ON_CHIP_PADDING)
    # Allocations whose buffers the plan names no instruction of (none in practice).
    accounted = sum(b.allocation_bytes for b in whole)
    ledger.add(OVERHEAD, heap.whole_program_bytes - accounted, ON_CHIP_PADDING)
    if temporaries:
        _temporaries(ledger, heap)


def _temporaries(ledger: _ChipLedger, heap: ProgramHeap) -> None:
    """The temporaries' allocations: the values live at the heap's peak, at their
    elements' bytes, and the rest (padding, what the heap leaves unused)."""
    allocated = heap.total_allocation_bytes - heap.whole_program_bytes
    values = min(allocated, heap.temp_value_bytes)
    ledger.add(ACTIVATIONS, values, ON_CHIP_TEMPS)
    ledger.add(OVERHEAD, allocated - values, ON_CHIP_PADDING)


def _shared(total: int, weights: dict[str, int]) -> dict[str, int]:
    """`total` in the proportions of `weights`, in whole bytes adding up to it
    (largest remainders first); not told where there are no weights."""
    whole = sum(weights.values())
    if total <= 0:
        return {}
    if whole <= 0:
        return {OTHER: total}
    shares = {k: total * b // whole for k, b in weights.items()}
    left = total - sum(shares.values())
    by_remainder = sorted(weights, key=lambda k: -(total * weights[k] % whole))
    for kind in by_remainder[:left]:
        shares[kind] += 1
    return shares
