"""The run's programs as XLA:TPU compiled them for a topology (`--tpu`), and what
a chip of it needs, from the `tpu` rows tpu/compile.py added to the trace.

A program's need on one chip is its HBM plan (every HBM buffer allocation of the
TPU buffer assignment but the thread-local ones: arguments, outputs, constants,
temporaries) plus its generated code; where XLA:TPU's dump gave no plan, its
memory analysis (arguments + outputs - aliased + temps + code). The run's need on
a chip is the program running at the run's peak so measured, plus the arrays
live at the peak outside it, at the sizes XLA:TPU gives their shapes, and never
less than any one program's own need (a program's arguments need not have been
arrays of the run: a script that only compiles its step made none).

The verdict weighs that need against XLA:TPU's own budget for a chip (the
`budget` row, measured from libtpu: tpu/compile.py), else the datasheet's
memory. A program XLA:TPU refused does not fit, by XLA:TPU's own figures.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tpumem.analysis import provenance
from tpumem.analysis.accelerators import ACCELERATORS
from tpumem.analysis.compiled.cpu_forms import CpuForm, cpu_forms
from tpumem.analysis.compiled.program_heap import ProgramHeap, program_heap
from tpumem.analysis.compiled.programs import CompiledProgram, RunningAtPeak
from tpumem.analysis.kinds import KindBytes
from tpumem.analysis.peak import LiveGroup
from tpumem.hlo.refusals import VMEM, Refusal, refusal
from tpumem.hlo.schema import HloError
from tpumem.hlo.tiles import parse_shape
from tpumem.trace.hlo_rows import hlo_rows
from tpumem.trace.model import Trace
from tpumem.trace.tpu_rows import TpuBudget, TpuCompile, TpuHeld, TpuLayouts, TpuRow, tpu_rows

# How `tpumem fit` counts the arrays a script held beside a program's arguments:
# each stand-in's shard on one chip in XLA:TPU's tiles (hlo/tiles.py), the most
# held at any of its calls.
BESIDE = "held beside its arguments, in XLA:TPU's tiles (estimated)"


@dataclass(frozen=True, slots=True)
class TpuProgram:
    """One program of the run, compiled for the topology."""

    compile: TpuCompile
    heap: ProgramHeap | None  # the TPU buffer assignment, where XLA:TPU dumped it

    @property
    def name(self) -> str:
        return self.compile.module

    def memory(self, name: str) -> int:
        return self.compile.memory.get(name, 0)

    @property
    def code_bytes(self) -> int:
        return self.memory("generated_code_bytes")

    @property
    def need_bytes(self) -> int:
        """What one chip holds while it runs: its HBM plan and its code."""
        if self.heap is not None:
            return self.heap.total_allocation_bytes + self.code_bytes
        arguments, outputs = self.memory("argument_bytes"), self.memory("output_bytes")
        return (
            arguments
            + outputs
            - self.memory("alias_bytes")
            + self.memory("temp_bytes")
            + self.code_bytes
        )

    @property
    def temp_bytes(self) -> int:
        """Temporaries in HBM (the plan's), else XLA's memory analysis'."""
        if self.heap is not None:
            return self.heap.total_allocation_bytes - self.heap.whole_program_bytes
        return self.memory("temp_bytes")

    @property
    def padding_bytes(self) -> int:
        """Bytes the TPU layouts add to the buffers live at the program's peak."""
        return 0 if self.heap is None else sum(b.padding_bytes for b in self.heap.live_at_peak)


@dataclass(frozen=True, slots=True)
class TpuRefused:
    """A program XLA:TPU would not compile for the topology: it does not fit."""

    compile: TpuCompile
    refusal: Refusal  # XLA:TPU's figures, as its message gives them
    # Its plan on a larger chip (the compile's `diagnostic` topology), where made.
    heap: ProgramHeap | None = None

    @property
    def name(self) -> str:
        return self.compile.module

    @property
    def diagnostic(self) -> str | None:
        """The topology the plan is of (never the refusing one)."""
        return self.compile.diagnostic if self.heap is not None else None

    @property
    def message(self) -> str:
        return self.compile.error or ""


@dataclass(frozen=True, slots=True)
class TpuCandidate:
    """A change `tpumem fit` compiled in place of a refused program, to see
    whether it fits (compile_only.py): XLA:TPU's own answer for the change."""

    compile: TpuCompile
    program: TpuProgram | None  # compiled: its plan; None: XLA:TPU refused it too

    @property
    def change(self) -> str:
        return self.compile.change or ""

    @property
    def need_bytes(self) -> int | None:
        """A chip's need with the change: its plan and what the script held beside."""
        if self.program is None:
            return None
        return self.program.need_bytes + (self.compile.outside_bytes or 0)


@dataclass(frozen=True, slots=True)
class TpuFit:
    """What one chip of the topology needs for the run, from XLA:TPU, and whether
    that fits in what XLA:TPU allows a chip."""

    program: str | None  # the program counted: running at the peak, else the largest
    running_at_peak: bool
    program_bytes: int
    arrays_bytes: int  # the arrays at the peak outside the program, in TPU layouts
    arrays_label: str
    need_bytes: int
    usable_bytes: int  # XLA:TPU's budget (measured), else the datasheet's memory
    usable_label: str  # provenance.MEASURED with libtpu's budget, else DATASHEET
    fits: bool  # a need within the budget, every program compiled
    refused: str | None = None  # the program XLA:TPU refused (the run's need is then its)
    not_compiled: int = 0  # programs XLA:TPU did not compile for another reason
    # The need by kind, adding up to it (chip_kinds.py); () where not planned.
    kinds: tuple[KindBytes, ...] = ()
    argument_kinds: tuple[str, ...] = ()  # of the program counted, by argument number

    @property
    def spare_bytes(self) -> int:
        """Headroom (positive) or overshoot (negative)."""
        return self.usable_bytes - self.need_bytes

    @property
    def share(self) -> float:
        """The need as a share of what a chip may hold."""
        return self.need_bytes / self.usable_bytes


@dataclass(frozen=True, slots=True)
class TpuTarget:
    """The run's programs compiled for one topology."""

    topology: str
    device_kind: str
    programs: tuple[TpuProgram, ...]  # largest need first
    failed: tuple[TpuCompile, ...]  # not compiled for another reason than their size
    layouts: dict[tuple[tuple[int, ...], str], int]
    seconds: float  # XLA:TPU's compile time, all programs and layouts
    refused: tuple[TpuRefused, ...] = ()  # too large for a chip, largest first
    budget: TpuBudget | None = None  # XLA:TPU's own limit per chip, from libtpu
    fit: TpuFit | None = None
    # Code of the programs the run lowered in the CPU's form, compiled so (not fit's).
    cpu_forms: tuple[CpuForm, ...] = ()
    # Changes `tpumem fit` compiled in place of refused programs (none of the run's).
    candidates: tuple[TpuCandidate, ...] = ()
    # Programs a sweep's earlier point compiled, read back (not in `seconds`).
    reused: int = 0

    @property
    def generation(self) -> str:
        return self.topology.split(":")[0]


def tpu_targets(trace: Trace) -> tuple[TpuTarget, ...]:
    """Each topology the trace's programs were compiled for (a chip's need for the
    run is tpu_fit's)."""
    by_topology: dict[str, list[TpuRow]] = {}
    for row in tpu_rows(trace):
        by_topology.setdefault(row.topology, []).append(row)
    if not by_topology:
        return ()
    forms = _cpu_forms(trace)
    targets = []
    for topology, rows in by_topology.items():
        every = _held_again([r for r in rows if isinstance(r, TpuCompile)], rows)
        compiles = _diagnosed([r for r in every if r.change is None])
        candidates = tuple(
            TpuCandidate(c, TpuProgram(c, _heap(c)) if c.error is None else None)
            for c in every
            if c.change is not None
        )
        layouts = next((r for r in rows if isinstance(r, TpuLayouts)), None)
        budget = next((r for r in rows if isinstance(r, TpuBudget)), None)
        programs = [TpuProgram(c, _heap(c)) for c in compiles if c.error is None]
        programs.sort(key=lambda p: (-p.need_bytes, p.name))
        refused, failed = [], []
        for c in compiles:
            said = refusal(c.error) if c.error is not None else None
            if said is not None:
                refused.append(TpuRefused(c, said, _heap(c) if c.diagnostic else None))
            elif c.error is not None:
                failed.append(c)
        refused.sort(key=lambda r: -(r.refusal.needed.bytes if r.refusal.needed else 0))
        seconds = sum(c.seconds for c in compiles) + (layouts.seconds if layouts else 0.0)
        target = TpuTarget(
            topology=topology,
            device_kind=next((c.device_kind for c in compiles if c.device_kind), ""),
            programs=tuple(programs),
            failed=tuple(failed),
            layouts=layouts.sizes if layouts else {},
            seconds=seconds,
            refused=tuple(refused),
            budget=budget,
            cpu_forms=tuple(f for c in compiles for f in forms.get(c.program_id, ())),
            candidates=candidates,
            reused=sum(c.reused for c in compiles),
        )
        targets.append(target)
    return tuple(targets)


def _held_again(compiles: list[TpuCompile], rows: list[TpuRow]) -> list[TpuCompile]:
    """Each compile with the most the script held beside it at any call, its
    later (cached) calls' included (fit's TpuHeld rows), a candidate's as its
    program's."""
    most: dict[int, int] = {}
    for row in rows:
        if isinstance(row, TpuHeld):
            most[row.program_id] = max(most.get(row.program_id, 0), row.outside_bytes)
    found = []
    for c in compiles:
        # (A candidate is held beside as the program it stands in for.)
        key = c.change_of if c.change_of is not None else c.program_id
        if key in most:
            c = replace(c, outside_bytes=max(c.outside_bytes or 0, most[key]))
        found.append(c)
    return found


def _diagnosed(compiles: list[TpuCompile]) -> list[TpuCompile]:
    """The compiles, each refusal replaced by its diagnosis where a later row
    holds one (the refusal is written first: a diagnostic compile may die)."""
    kept: list[TpuCompile] = []
    refusals: dict[tuple[int | None, str], int] = {}  # where each refusal is in `kept`
    for row in compiles:
        key = (row.program_id, row.module)
        if row.diagnostic is not None and key in refusals:
            kept[refusals.pop(key)] = row
            continue
        if row.error is not None and row.diagnostic is None:
            refusals[key] = len(kept)
        kept.append(row)
    return kept


def _cpu_forms(trace: Trace) -> dict[int | None, tuple[CpuForm, ...]]:
    """Each run program's code in the CPU's form, by its id (none for fit, whose
    programs the script lowered for the TPU and which keeps no run's HLO)."""
    found: dict[int | None, tuple[CpuForm, ...]] = {}
    for row in hlo_rows(trace):
        if row is not None and row.input_data is not None and row.program_id not in found:
            found[row.program_id] = cpu_forms(row.program_id, row.input_data)
    return found


def _heap(compiled: TpuCompile) -> ProgramHeap | None:
    if compiled.hlo is None:
        return None
    try:
        return program_heap(compiled.hlo)
    except HloError:
        return None


def _resized(
    groups: tuple[LiveGroup, ...], layouts: dict[tuple[tuple[int, ...], str], int]
) -> tuple[int, int]:
    """(bytes of the groups, the same in TPU layouts): shapes XLA:TPU sized at
    theirs, others as they were."""
    before = after = 0
    for group in groups:
        dims = parse_shape(group.shape)
        size = (
            layouts.get((dims, group.dtype))
            if dims is not None and group.dtype is not None
            else None
        )
        before += group.bytes
        after += group.count * size if size is not None else group.bytes
    return before, after


def usable(target: TpuTarget) -> tuple[int, str] | None:
    """(bytes, provenance) a chip may hold: XLA:TPU's budget where measured, else
    the datasheet's memory of the generation; None for a generation of neither."""
    if target.budget is not None:
        return target.budget.usable_bytes, provenance.MEASURED
    name = f"TPU {target.generation}"
    sheet = next((a.memory_bytes for a in ACCELERATORS if a.name == name), None)
    return None if sheet is None else (sheet, provenance.DATASHEET)


def tpu_fit(
    target: TpuTarget,
    peak_bytes: int,
    groups: tuple[LiveGroup, ...],
    running: tuple[RunningAtPeak, ...],
) -> TpuFit | None:
    """A chip's need for the run: the program at the peak (else the largest) as
    XLA:TPU planned it, plus the arrays live at the peak outside that program, and
    at least the largest program's own need; a refused program's need where
    XLA:TPU refused one. `peak_bytes` 0 and no groups: the programs alone."""
    limit = usable(target)
    if limit is None or not (target.programs or target.refused):
        return None
    usable_bytes, usable_label = limit
    label = provenance.DERIVED if target.layouts else provenance.ESTIMATED
    if target.refused:
        first = target.refused[0]
        said = first.refusal
        # What XLA:TPU says the program needs, and at least its overshoot past the
        # budget (its rounded "Used 15.75G" may be under the budget measured).
        over = usable_bytes + (said.over.bytes if said.over else 1)
        need = max(said.needed.bytes if said.needed else 0, over)
        if said.space == VMEM:
            # A kernel's blocks against on-chip VMEM: its HBM need is not known
            # (never planned); the verdict and the table say VMEM's figures.
            need = usable_bytes
        return TpuFit(
            program=first.name,
            running_at_peak=False,
            program_bytes=need,
            arrays_bytes=0,
            arrays_label=label,
            need_bytes=need,
            usable_bytes=usable_bytes,
            usable_label=usable_label,
            fits=False,
            refused=first.name,
        )
    program, outside = None, peak_bytes
    at_peak = running[0].program if running else None
    if at_peak is not None:
        program = same_program(target, at_peak)
        if program is not None:
            outside = max(0, peak_bytes - _plan_bytes(at_peak, running[0].temp_bytes))
    counted = program or target.programs[0]
    before, after = _resized(groups, target.layouts)
    arrays = round(outside * (after / before)) if before else outside
    if program is None:
        # No program of the run was running at its peak: the arrays then, and the
        # working memory (temps, code) of the program that needs the most.
        need = arrays + counted.temp_bytes + counted.code_bytes
    else:
        need = arrays + counted.need_bytes
    # Never below a program's own need: its arguments are on the chip while it
    # runs, whether or not the run ever held them as arrays; with what `tpumem fit`
    # saw the script hold beside them as it called the program.
    largest = max(target.programs, key=lambda p: p.need_bytes + (p.compile.outside_bytes or 0))
    beside = largest.compile.outside_bytes or 0
    if largest.need_bytes + beside > need:
        counted, program, arrays = largest, None, beside
        need, label = largest.need_bytes + beside, BESIDE
    return TpuFit(
        program=counted.name,
        running_at_peak=program is not None,
        program_bytes=counted.need_bytes,
        arrays_bytes=arrays,
        arrays_label=label,
        need_bytes=need,
        usable_bytes=usable_bytes,
        usable_label=usable_label,
        fits=need <= usable_bytes and not target.failed,
        not_compiled=len(target.failed),
    )


def same_program(target: TpuTarget, program: CompiledProgram) -> TpuProgram | None:
    for candidate in target.programs:
        if program.program_id is not None and candidate.compile.program_id == program.program_id:
            return candidate
    return next((c for c in target.programs if c.name == program.name), None)


def _plan_bytes(program: CompiledProgram, temp_live: int) -> int:
    """What of the run's peak the program held on the run's own backend: its
    arguments and outputs (live arrays) and its temporaries live there."""
    if program.heap is not None:
        return program.heap.whole_program_bytes + temp_live
    memory = program.memory
    if memory is None:
        return temp_live
    return (
        (memory.argument_bytes or 0)
        + (memory.output_bytes or 0)
        - (memory.alias_bytes or 0)
        + temp_live
    )


# How far apart the run's plan of a program's temporaries and XLA:TPU's may be
# before the answer says the activations it shows are not the TPU's.
PLANS_APART = 0.10


@dataclass(frozen=True, slots=True)
class PlansApart:
    """A program running at the peak whose temporaries on the run's backend and
    XLA:TPU's plan of them for a topology are more than PLANS_APART apart."""

    program: str  # as the reports name it
    topology: str
    run_bytes: int  # its temporaries live at the run's peak
    tpu_bytes: int  # XLA:TPU's temporaries for the topology


def plans_apart(
    running: tuple[RunningAtPeak, ...], targets: tuple[TpuTarget, ...]
) -> tuple[PlansApart, ...]:
    found = []
    for at_peak in running:
        for target in targets:
            tpu = next((p for p in target.programs if p.name == at_peak.program.name), None)
            if tpu is None:
                continue
            here, there = at_peak.temp_bytes, tpu.temp_bytes
            if abs(here - there) > PLANS_APART * max(here, there, 1):
                found.append(PlansApart(at_peak.program.shown_name, target.topology, here, there))
    return tuple(found)
