"""What to change: each change the trace gives a figure for, with that figure.
No generic tips: a change is named only where the run shows the bytes it is
about, at the peak of the device that peaked highest (or, for growth, on the
device that grows).

- GROWTH: bytes that stay from step to step and grow, at the line that holds
  them (growth.py).
- DONATE: a JAX program running at the peak whose outputs have the shapes of
  arguments it was not given to reuse (`donate_argnums`): its outputs take memory
  of their own while the arguments stay live, the outputs' bytes twice at the peak
  (XLA's buffer assignment: an output aliased to an argument shares its allocation);
  or a call whose outputs were live at the peak beside the arrays they replace,
  which the caller dropped after it (held_twice.py: by what happens, not names).
- REMAT: a line whose forward-pass values are live at a program's own peak in the
  backward pass: activations kept for the gradient, what rematerialization
  recomputes instead of keeping (op_passes.py); at most what it would free. With
  `--tpu`, where XLA:TPU plans the program's temporaries more than 10% apart
  from the run's backend (tpu.py's plans_apart), from XLA:TPU's plan.
- BF16: on a TPU slice (`--tpu`), the f32 state (parameters, optimizer state,
  other state carried between steps) the program running at the peak takes as
  arguments (by the kinds a chip's ledger gives them: chip_kinds.py), in
  XLA:TPU's plan, against the same arrays in bfloat16 in XLA:TPU's layouts
  (hlo/tiles.py's rule, held to libtpu's own sizes by the suite).
- MOMENTS: an optimizer state at the peak twice the parameters (by the
  framework's objects: Adam's two moments a parameter): an optimizer with one
  value a parameter holds the state less the parameters (estimated).
- BATCH: the activations at the peak (by the framework's objects: the values
  the step's ops made, or its program's temporaries) scale with the batch: half
  the batch holds half of them (estimated).
- PADDING: on a TPU slice, the shape whose buffers at the program's peak XLA:TPU's
  tiles pad most (its plan: each buffer's bytes and its elements').
- POOL: an allocator that held far more than the run needed (its own pool,
  measured), with the setting that holds it to the need.
- HEADROOM: free memory at the peak in pieces too small to use, where it is a
  large share of the peak and the framework declares a setting that avoids it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpumem.analysis import provenance
from tpumem.analysis.compiled.held_twice import HeldTwice
from tpumem.analysis.compiled.op_passes import FORWARD, has_tape, op_pass
from tpumem.analysis.compiled.program_heap import (
    OUTPUT,
    PARAMETER,
    TEMPORARY,
    HeapBuffer,
    ProgramHeap,
)
from tpumem.analysis.compiled.programs import CompiledProgram, RunningAtPeak, short_program_name
from tpumem.analysis.compiled.tpu import (
    PlansApart,
    TpuCandidate,
    TpuProgram,
    TpuTarget,
    same_program,
    usable,
)
from tpumem.analysis.kinds import (
    ACTIVATIONS,
    BY_ADAPTER,
    BY_SUPERSEDED,
    GRADIENTS,
    INPUTS,
    OPTIMIZER,
    PARAMETERS,
    STATE,
)
from tpumem.analysis.peak import highest
from tpumem.hlo.tiles import parse_shape, tiled_bytes
from tpumem.trace.memory_settings import MemorySettings
from tpumem.trace.metadata import KeptArrays
from tpumem.trace.tpu_rows import RECOMPUTED, SHARDED_OVER, TpuCompile

if TYPE_CHECKING:
    from tpumem.analysis.trace_figures import DeviceAnalysis

DONATE, REMAT, GROWTH, POOL, HEADROOM = "donate", "remat", "growth", "pool", "headroom"
BF16, PADDING, MOMENTS, BATCH = "bf16", "padding", "moments", "batch"
SEARCH = "search"  # `tpumem fit`: the changes XLA:TPU compiled a refused program with
LARGER = "larger"  # `tpumem fit --search`: the largest batch a step that fits compiles at
# A leak first: it outgrows every other change the longer the run goes on.
# A smaller batch after the changes that keep what the program computes.
KEYS = (SEARCH, LARGER, GROWTH, DONATE, REMAT, BF16, MOMENTS, BATCH, PADDING, POOL, HEADROOM)

# An optimizer state this many times the parameters keeps two values for each
# (Adam's, AdamW's, Adamax's moments; nearer two than one: at the peak, a moment
# the step has just replaced is the step's): one with one keeps the state less
# the parameters.
TWO_MOMENTS = 1.5
# Below these a change is not worth a line: a share of the device's peak, and bytes.
SMALLEST_SHARE = 0.05
SMALLEST_BYTES = 64 * 1024
REMAT_LINES = 2  # the lines holding most activations, at most
POOL_RATIO = 2.0  # a pool this many times the peak, and POOL_EXCESS above it
POOL_EXCESS = 256 << 20
HEADROOM_SHARE = 0.10
# Half the batch is advised where the activations are at least this share of the
# peak: below it the peak moves, at half the batch, to a moment they do not hold
# (an optimizer's update: on a Keras MLP whose activations were 13% of the
# peak, half the batch took 1% off it), and no figure from the trace would hold.
BATCH_SHARE = 0.5


@dataclass(frozen=True, slots=True)
class Change:
    key: str  # one of KEYS
    device: str
    bytes: int  # what it is about at the peak (GROWTH: a step's growth)
    how: str  # how the figure was obtained (provenance)
    program: str | None = None  # DONATE, REMAT: the program
    line: str | None = None  # REMAT, GROWTH: the line (file:line)
    # DONATE, BF16: the arguments; POOL, HEADROOM: settings; PADDING: the shape;
    # BATCH: the Keras call whose batch_size sets it ("fit", "evaluate", "predict")
    names: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()  # REMAT: the ops whose values are kept
    start_bytes: int | None = None  # GROWTH: what the line held after warm-up
    end_bytes: int | None = None  # GROWTH: what it held at the last step read
    pool_bytes: int | None = None  # POOL: what the allocator held
    # BF16: the arguments' bytes in f32 (PADDING: the buffers' bytes with padding;
    # BATCH: the activations at the peak)
    before_bytes: int | None = None
    # BF16, PADDING (and REMAT where XLA:TPU's plan is far from the run's): the slice
    topology: str | None = None
    # GROWTH: the script's container that held what grew when it ended, and the
    # line that adds to it (adapters/kept_arrays.py)
    kept: KeptArrays | None = None
    # How sure the figure is: exact (XLA's compile of the program or of the
    # changed one), measured (the run), modeled (the allocator's model) or
    # estimated (a rule: an upper bound, a layout from shapes).
    known: str = provenance.ESTIMATED
    # SEARCH with recomputation: XLA's operations per chip a step with the change,
    # and as written (from the compile that showed what fills it)
    flops: float | None = None
    flops_before: float | None = None
    # BATCH: the peak is a training step's (an optimizer's state or gradients at
    # it, outside Keras' evaluate and predict): two half batches accumulated keep
    # the batch the optimizer sees
    accumulate: bool = False


def what_to_change(
    backend: str,
    settings: MemorySettings | None,
    devices: tuple[DeviceAnalysis, ...],
    targets: tuple[TpuTarget, ...] = (),
    apart: tuple[PlansApart, ...] = (),
    keras: bool = False,
) -> tuple[Change, ...]:
    """The changes the run gives figures for, in the order of KEYS, largest first
    within each key. The allocator's settings (POOL, HEADROOM) are a
    GPU's: on a CPU and a TPU there is none to give. `apart`: the programs at
    the peak whose temporaries XLA:TPU plans far from the run's (tpu.py)."""
    found: list[Change] = []
    for target in targets:
        found += _candidates(target)
        program = _fitted(target)
        if program is not None and program.heap is not None:
            need = target.fit.need_bytes if target.fit is not None else program.need_bytes
            found += [
                c
                for c in (_bf16(target, program.heap), _padding(target, program.heap))
                if c is not None and _worth(c, need)
            ]
    if not devices:
        return tuple(sorted(found, key=lambda c: (KEYS.index(c.key), -c.bytes)))
    device = highest(devices)
    running = [r.program for r in device.programs_at_peak]
    if settings is not None and settings.donation is not None:
        donations = [c for r in device.programs_at_peak if (c := _donate(device, r)) is not None]
        donations += [_donate_dropped(device, h) for h in device.held_twice]
        found += _largest_by(donations, "program")
    # A program whose temporaries XLA:TPU plans far from the run's: what to
    # recompute is read from the target's plan, not the run's backend's.
    on_tpu = {a.program: a.topology for a in apart}
    for at_peak in running:
        slice_ = next((t for t in targets if t.topology == on_tpu.get(at_peak.shown_name)), None)
        tpu = same_program(slice_, at_peak) if slice_ is not None else None
        if slice_ is not None and tpu is not None and tpu.heap is not None:
            found += _remat(device, at_peak, tpu.heap, slice_.topology)
        else:
            found += _remat(device, at_peak)
    found += _largest_by([c for d in devices for c in _growth(d)], "line")
    found += [c for c in (_moments(device), _batch(device, keras)) if c is not None]
    if backend == "gpu":
        found += [c for c in (_pool(device, settings), _headroom(device, settings)) if c]
    kept = [c for c in found if c.topology is not None or _worth(c, device.peak.bytes)]
    return tuple(sorted(kept, key=lambda c: (KEYS.index(c.key), -c.bytes)))


def _candidates(target: TpuTarget) -> list[Change]:
    """Per program XLA:TPU refused, what `tpumem fit` compiled in its place
    (adapters/jax/search.py), with a chip's need with it (`before_bytes`: the
    changed program's plan and what the script held beside it) against the
    budget (`pool_bytes`): the smallest set that fits; else the compiled one
    that needs least (over the budget with what was held beside); else the
    refusal stands (`before_bytes` None). The figure is that need."""
    limit = usable(target)
    if limit is None:
        return []
    by_program: dict[int | None, list[TpuCandidate]] = {}
    for candidate in target.candidates:
        by_program.setdefault(candidate.compile.change_of, []).append(candidate)
    found = []
    for refused in target.refused:
        tried = by_program.get(refused.compile.program_id, [])
        if not tried:
            continue
        compiled = [c for c in tried if c.need_bytes is not None]
        # The fewest changes that fit; of those (or of none that fit), the least need.
        compiled.sort(
            key=lambda c: ((c.need_bytes or 0) > limit[0], c.change.count("; "), c.need_bytes or 0)
        )
        chosen = compiled[0] if compiled else tried[-1]
        cost = _recompute_cost(chosen, refused.compile)
        need = chosen.need_bytes
        beside = chosen.compile.outside_bytes or 0
        found.append(
            Change(
                SEARCH,
                target.topology,
                need or 0,
                f"XLA:TPU's compile of the changed program for {target.topology}"
                + (", with the arrays held beside it in its tiles" if beside else ""),
                program=short_program_name(refused.name),
                names=chosen.compile.change_names or (),
                ops=(chosen.change,),
                before_bytes=need,
                pool_bytes=limit[0],
                topology=target.topology,
                # (What the script held beside is sized by the tile rule: estimated.)
                known=provenance.EXACT if not beside else provenance.ESTIMATED,
                flops=cost[0],
                flops_before=cost[1],
            )
        )
    for program in target.programs:
        tried = by_program.get(program.compile.program_id, [])
        if tried:
            found.append(_larger(target, program, tried, limit[0]))
    return found


def _recompute_cost(chosen: TpuCandidate, refused: TpuCompile) -> tuple[float | None, float | None]:
    """A change that recomputes: XLA's operations a step with it, and as written
    (counted where XLA:TPU compiled the program to show what fills it), where
    both are known and the change keeps the batch and the sharding (else the
    counts measure those too)."""
    words = chosen.change
    if RECOMPUTED not in words or SHARDED_OVER in words or "batch " in words:
        return None, None
    if chosen.compile.flops is None or refused.flops is None:
        return None, None
    return chosen.compile.flops, refused.flops


def _larger(
    target: TpuTarget, program: TpuProgram, tried: list[TpuCandidate], limit: int
) -> Change:
    """A step that fits, compiled at twice its batch and more (fit --search, in
    that order, until one was refused): the largest that fits, and the next,
    which does not (`ops`: their words; the first None where none fits)."""
    fitting = [c for c in tried if c.need_bytes is not None and c.need_bytes <= limit]
    over = next((c for c in tried if c not in fitting), None)
    best = fitting[-1] if fitting else None
    beside = (best or tried[0]).compile.outside_bytes or 0
    return Change(
        LARGER,
        target.topology,
        (best.need_bytes or 0) if best else program.need_bytes,
        f"XLA:TPU's compile of the step at each batch for {target.topology}"
        + (", with the arrays held beside it in its tiles" if beside else ""),
        program=short_program_name(program.name),
        ops=(best.change if best else "", over.change if over else ""),
        before_bytes=best.need_bytes if best else None,
        pool_bytes=limit,
        topology=target.topology,
        known=provenance.EXACT if not beside else provenance.ESTIMATED,
    )


def _fitted(target: TpuTarget) -> TpuProgram | None:
    """The program a chip's need counts (running at the peak, else the largest)."""
    name = target.fit.program if target.fit is not None else None
    return next((p for p in target.programs if p.name == name), None)


# What bfloat16 halves: the state a step carries. Other state is a plain-JAX
# step's parameters and moments where no framework object says which is which.
_BF16_KINDS = (PARAMETERS, OPTIMIZER, STATE)


def _bf16(target: TpuTarget, heap: ProgramHeap) -> Change | None:
    """The program's f32 arguments that are state it carries (parameters,
    optimizer state, other state), by the kinds the chip's ledger gave them
    (chip_kinds.py: the run's, or the script's objects'), never by their names."""
    kinds = target.fit.argument_kinds if target.fit is not None else ()
    f32 = [
        b
        for b in heap.whole_values
        if b.group == PARAMETER
        and b.dtype == "f32"
        and 0 <= b.parameter_number < len(kinds)
        and kinds[b.parameter_number] in _BF16_KINDS
        and parse_shape(b.dims) is not None
    ]
    if not f32:
        return None
    before = sum(b.bytes for b in f32)
    after = sum(tiled_bytes(parse_shape(b.dims) or (), 16).best for b in f32)
    names = dict.fromkeys(_argument(b.op_name) for b in f32)
    return Change(
        BF16,
        target.topology,
        before - after,
        "f32: XLA:TPU's plan; bfloat16: estimated in XLA:TPU's tiles (hlo/tiles.py)",
        program=short_program_name(heap.module),
        names=tuple(n for n in names if n),
        before_bytes=before,
        topology=target.topology,
    )


def _padding(target: TpuTarget, heap: ProgramHeap) -> Change | None:
    by_shape: dict[str, tuple[int, int]] = {}
    for buffer in heap.live_at_peak:
        if buffer.padding_bytes and buffer.dims:
            key = f"{buffer.dtype}{buffer.dims}"
            padded, total = by_shape.get(key, (0, 0))
            by_shape[key] = (padded + buffer.padding_bytes, total + buffer.bytes)
    if not by_shape:
        return None
    shape, (padded, total) = max(by_shape.items(), key=lambda kv: (kv[1][0], kv[0]))
    return Change(
        PADDING,
        target.topology,
        padded,
        "XLA:TPU's plan: each buffer's bytes against its elements'",
        program=short_program_name(heap.module),
        names=(shape,),
        before_bytes=total,
        topology=target.topology,
        known=provenance.EXACT,
    )


def _worth(change: Change, peak: int) -> bool:
    size = change.bytes
    if change.key == GROWTH:  # (what it grew by over the run, not a step's)
        size = (change.end_bytes or 0) - (change.start_bytes or 0)
    return size > 0 and size >= max(SMALLEST_BYTES, SMALLEST_SHARE * peak)


def _donate(device: DeviceAnalysis, running: RunningAtPeak) -> Change | None:
    """The program's outputs matched, largest first, to its arguments of the same
    dtype and dimensions that no output shares an allocation with, and that the
    run's ledger did not tell inputs (a batch is not state: kinds.py)."""
    program, kinds = running.program, running.kinds.arguments
    heap = program.heap
    if heap is None:
        return None
    # By dtype and size: XLA may give an output back as a bitcast of another shape.
    arguments: dict[tuple[str, int], list[HeapBuffer]] = {}
    for buffer in heap.live_at_peak:
        number = buffer.parameter_number
        if (
            buffer.group == PARAMETER
            and not buffer.live_out  # (live out: donated)
            and (kinds[number] if 0 <= number < len(kinds) else INPUTS) != INPUTS
        ):
            arguments.setdefault((buffer.dtype, buffer.bytes), []).append(buffer)
    twice, names = 0, dict[str, None]()
    outputs = [b for b in heap.live_at_peak if b.group == OUTPUT and b.dims]
    for output in sorted(outputs, key=lambda b: -b.bytes):
        same = arguments.get((output.dtype, output.bytes))
        if same:
            argument = same.pop(0)
            twice += output.bytes
            names[_argument(argument.op_name)] = None
    if not twice:
        return None
    return Change(
        DONATE,
        device.device,
        twice,
        "XLA's buffer assignment of the program (compile-time)",
        program=program.shown_name,
        names=tuple(n for n in names if n),
        known=provenance.EXACT,
    )


def _donate_dropped(device: DeviceAnalysis, held: HeldTwice) -> Change:
    """A call's outputs live beside the arrays they replace, which the caller
    drops after the call (held_twice.py)."""
    names = dict.fromkeys(_argument(b.op_name) for b in held.arguments)
    return Change(
        DONATE,
        device.device,
        held.bytes,
        "the run's arrays at the peak; the arguments: XLA's buffer assignment",
        program=held.program.shown_name,
        names=tuple(n for n in names if n),
        known=provenance.MEASURED,
    )


def _argument(op_name: str) -> str:
    """The argument's name in JAX's metadata of a parameter (`params['w1']`,
    `state.opt_state[0].mu`): the Python argument it is part of."""
    for stop in ("[", ".", "("):
        op_name = op_name.split(stop, 1)[0]
    return op_name


def _remat(
    device: DeviceAnalysis,
    program: CompiledProgram,
    plan: ProgramHeap | None = None,
    topology: str | None = None,
) -> list[Change]:
    """The lines holding most forward-pass values at the program's own peak, in
    a program with a backward pass (a training step; an inference program's
    values are nobody's to recompute): values kept for the gradient. Their bytes
    as the lines table gives them (scaled where the run recorded the program's
    temporaries to a precision); with `plan`, as XLA:TPU plans them for
    `topology`."""
    heap = plan if plan is not None else program.heap
    if heap is None or not heap.has_backward:
        return []
    temps = [b for b in heap.live_at_peak if b.group == TEMPORARY]
    tape = has_tape([b.op_name for b in temps])
    opened = [
        p for p in (device.lines.programs if device.lines else ()) if p.name == program.shown_name
    ]
    scale = opened[0].scale if opened and plan is None else 1.0
    # The line that ran the program is no line inside it (Keras' fit: the values
    # are its layers'; nothing of the user's to wrap).
    call = opened[0].call if opened else None
    by_line: dict[str, tuple[int, dict[str, None]]] = {}
    for buffer in temps:
        if buffer.source and buffer.source != call and op_pass(buffer.short_op, tape) == FORWARD:
            total, ops = by_line.get(buffer.source, (0, {}))
            ops[buffer.short_op] = None
            by_line[buffer.source] = (total + buffer.bytes, ops)
    largest = sorted(by_line.items(), key=lambda kv: (-kv[1][0], kv[0]))[:REMAT_LINES]
    return [
        Change(
            REMAT,
            device.device,
            round(total * scale),
            "at most: the values XLA's buffer assignment keeps at the program's peak (compile-time)"
            if topology is None
            else f"at most: the values XLA:TPU's buffer assignment for {topology} keeps at "
            "the program's peak",
            program=program.shown_name,
            line=line,
            ops=tuple(ops),
            topology=topology,
        )
        for line, (total, ops) in largest
    ]


def _moments(device: DeviceAnalysis) -> Change | None:
    """An optimizer whose state at the peak is twice the parameters, by the
    framework's own objects (kinds.py): two values a parameter. One with one
    value a parameter holds the state less the parameters (estimated: its slot
    takes the parameter's dtype and shape; a step that does not donate holds
    both twice, old and new, and the difference is of both)."""
    if device.kinds is None:
        return None
    kinds = {k.kind: k for k in device.kinds.kinds}
    parameters, state = kinds.get(PARAMETERS), kinds.get(OPTIMIZER)
    if parameters is None or state is None or BY_ADAPTER not in state.how:
        return None
    if state.bytes < TWO_MOMENTS * parameters.bytes:
        return None
    return Change(
        MOMENTS,
        device.device,
        state.bytes - parameters.bytes,
        "one value a parameter instead of two: the optimizer's state less the parameters, "
        "at the peak (both by the framework's own objects)",
        before_bytes=state.bytes,
    )


def _batch(device: DeviceAnalysis, keras: bool) -> Change | None:
    """Half the batch: the activations at the peak, each the value of an op of
    the step (or a temporary of its program) over the batch's examples, take half
    their bytes. Estimated: the peak may move to a moment the activations do not
    hold, an allocator rounds, and a program's temporaries are counted whole (its
    gradients among them). Left out: a variable's earlier value the step still
    holds (no example's), and the inputs, which may be the whole dataset rather
    than the batch (Keras' fit on arrays holds them all)."""
    if device.kinds is None:
        return None
    kinds = {k.kind: k for k in device.kinds.kinds}
    activations = kinds.get(ACTIVATIONS)
    if activations is None:
        return None
    held = activations.bytes - activations.told(BY_SUPERSEDED)
    if held <= 0 or held < BATCH_SHARE * device.peak.bytes:
        return None
    phase = device.peak.phase  # Keras' evaluate() or predict(): its own batch_size
    call = (phase or "fit()").removesuffix("()")
    return Change(
        BATCH,
        device.device,
        held // 2,
        "half the activations at the peak (the framework's objects; a program's "
        "temporaries whole); the peak may move to a moment that holds fewer",
        names=(call,) if keras else (),
        before_bytes=held,
        accumulate=phase is None and (OPTIMIZER in kinds or GRADIENTS in kinds),
    )


def _largest_by(changes: list[Change], what: str) -> list[Change]:
    """One change for each value of its field `what`, the largest: a line that
    grows on several devices (the processes of a host) where it grows most; a
    program both donation rules found, at the larger figure."""
    kept: dict[object, Change] = {}
    for change in changes:
        key = getattr(change, what)
        if key not in kept or change.bytes > kept[key].bytes:
            kept[key] = change
    return list(kept.values())


def _growth(device: DeviceAnalysis) -> list[Change]:
    growth = device.growth
    if growth is None or not growth.growing:
        return []
    return [
        Change(
            GROWTH,
            device.device,
            round(stack.per_step_bytes),
            "bytes live at each step's lowest point",
            line=stack.frames[-1].location if stack.frames else None,
            start_bytes=stack.start_bytes,
            end_bytes=stack.end_bytes,
            kept=growth.kept,
            known=provenance.MEASURED,
        )
        for stack in growth.stacks[:1]
    ]


def _pool(device: DeviceAnalysis, settings: MemorySettings | None) -> Change | None:
    """The allocator's own pool, far above the peak: the setting that lets it grow
    as needed (the framework's growth setting), else its share to the need."""
    pre = device.preallocation
    pool, peak = pre.pool_peak_bytes, device.peak.bytes
    if pool is None or pre.pool_label != provenance.MEASURED:
        return None
    if pool < POOL_RATIO * peak or pool - peak < POOL_EXCESS:
        return None
    names: list[str] = []
    if settings is not None and settings.growth_settings:
        grow = settings.growth_settings[0]
        names.append(f"{grow.name}={grow.values[0]}")
    if settings is not None and settings.fraction_variable and pre.smallest_fraction:
        names.append(f"{settings.fraction_variable}={pre.smallest_fraction:.2f}")
    return Change(
        POOL,
        device.device,
        pool - peak,
        pre.pool_source,
        names=tuple(names),
        pool_bytes=pool,
        known=provenance.MEASURED,
    )


def _headroom(device: DeviceAnalysis, settings: MemorySettings | None) -> Change | None:
    room = device.headroom_bytes
    if room is None or room < HEADROOM_SHARE * device.peak.bytes:
        return None
    setting = settings.defragment_setting if settings is not None else None
    if not setting:
        return None  # (the fit advice counts it; there is nothing to set)
    return Change(
        HEADROOM,
        device.device,
        room,
        "free bytes at the peak outside the largest free block",
        names=(setting,),
        known=device.headroom_label,
    )
