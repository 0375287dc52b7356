"""Compiled programs' memory, as XLA itself planned it when each compiled.

Two records per program, when the adapter has both: XLA's memory analysis
(argument, output, alias, temp and generated-code bytes per device: a `program`
row) and the optimized HLO with its buffer assignment (an `hlo` row), from which
program_heap.py finds what fills the program. These are compile-time figures,
not a measurement of a run.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace

import numpy as np

from tpumem.analysis.compiled.program_heap import HeapBuffer, ProgramHeap, program_heap
from tpumem.hlo.schema import HloError
from tpumem.trace.hlo_rows import hlo_rows
from tpumem.trace.model import Trace
from tpumem.trace.records import ProgramRecord, decode_record, parse_object
from tpumem.trace.schema import PROGRAM
from tpumem.trace.source_paths import library_file, user_path
from tpumem.trace.stack_rows import Stack, call_stacks, op_stacks
from tpumem.units import format_bytes

# TensorFlow names a jit_compile function's module after the function and then
# its attributes (a_inference_step_12__XlaMustCompile_true_config_proto_<n>_...).
_TF_FUNCTION_ATTRIBUTES = re.compile(r"__XlaMustCompile_.*$")


def short_program_name(module: str) -> str:
    """A module's name as reports show it (the JSON keeps the whole name)."""
    return _TF_FUNCTION_ATTRIBUTES.sub("", module) or module


@dataclass(frozen=True, slots=True)
class ProgramMemory(ProgramRecord):
    """A program's row as the trace holds it, and when it compiled."""

    compiled_at_ns: int = 0


@dataclass(frozen=True, slots=True)
class CompiledProgram:
    """One compiled program: XLA's memory analysis of it and its memory plan,
    whichever of the two the trace holds."""

    name: str  # the HLO module's name, else the program's as the framework named it
    memory: ProgramMemory | None
    heap: ProgramHeap | None
    hlo_problem: str | None = None  # why its HLO was not read
    program_id: int | None = None  # XLA's id for it, where its HLO came with one

    @property
    def short_name(self) -> str:
        return short_program_name(self.name)

    @property
    def shown_name(self) -> str:
        """As the reports' words name it: a program its framework names by a word
        of its own (PyTorch/XLA: "graph <hash>", which its buffers' rows carry
        too) with that word first, the HLO module's name after it, so that one
        program has one name in every section of a report."""
        own = self.memory.name if self.memory is not None and not self.memory.module else None
        if own and own != "?" and own != self.name:
            return f"{own} ({self.short_name})"
        return self.short_name

    @property
    def xprof_name(self) -> str | None:
        """The name XProf's memory_viewer lists it by: `module(program id)`."""
        return None if self.program_id is None else f"{self.name}({self.program_id})"

    @property
    def peak_bytes(self) -> int:
        """The program's own peak: its heap's, else arguments + outputs + temps."""
        if self.heap is not None:
            return self.heap.peak_bytes
        memory = self.memory
        if memory is None:
            return 0
        return (memory.argument_bytes or 0) + (memory.output_bytes or 0) + (memory.temp_bytes or 0)


def programs(trace: Trace) -> tuple[ProgramMemory, ...]:
    """Every compiled program's memory analysis, in the order they compiled."""
    rows = np.flatnonzero(trace.is_kind(PROGRAM))
    times = trace.numbers("time_ns")[rows].tolist()
    result = []
    for time_ns, text in zip(times, trace.texts_at(rows), strict=True):
        record = parse_object(text)
        if record is None:
            continue  # a row cut short by a crash: nothing to show
        program = decode_record(ProgramMemory, record, "program", [])
        result.append(replace(program, compiled_at_ns=int(time_ns)))
    return tuple(sorted(result, key=lambda p: p.compiled_at_ns))


def compiled_programs(
    trace: Trace, memory: tuple[ProgramMemory, ...]
) -> tuple[CompiledProgram, ...]:
    """Every program, its HLO's memory plan joined to its memory analysis by
    module name (the n-th compile of a name to the n-th dump of it), largest
    peak first."""
    heaps = _heaps(trace)
    waiting: dict[str, list[ProgramMemory]] = {}
    unjoined: list[ProgramMemory] = []
    for program in memory:
        if program.module:
            waiting.setdefault(program.module, []).append(program)
        else:
            unjoined.append(program)
    found = []
    for heap, problem, program_id in heaps:
        if heap is None:
            found.append(CompiledProgram("?", None, None, problem))
            continue
        joined = waiting.get(heap.module)
        analysis = joined.pop(0) if joined else None
        found.append(CompiledProgram(heap.module, analysis, heap, program_id=program_id))
    for program in [*unjoined, *(p for rest in waiting.values() for p in rest)]:
        index = _same_sizes(program, found)
        if index is None:
            found.append(CompiledProgram(program.module or program.name, program, None))
        else:
            found[index] = replace(found[index], memory=program)
    return tuple(sorted(found, key=lambda p: (-p.peak_bytes, p.name)))


def _same_sizes(memory: ProgramMemory, found: list[CompiledProgram]) -> int | None:
    """A program whose analysis names no module (PyTorch/XLA names its graphs by
    hash) is the first plan not yet joined with the same argument, output and temp
    bytes, within the precision they were given to."""
    tolerance = memory.precision_bytes or 0
    argument, output, temp = memory.argument_bytes, memory.output_bytes, memory.temp_bytes
    if argument is None or output is None or temp is None:
        return None
    wanted = (argument, output, temp)
    for index, program in enumerate(found):
        heap = program.heap
        if heap is None or program.memory is not None:
            continue
        temp = heap.total_allocation_bytes - heap.whole_program_bytes
        sizes = (heap.parameter_bytes, heap.output_bytes, temp)
        if all(abs(a - b) <= tolerance for a, b in zip(sizes, wanted, strict=True)):
            return index
    return None


def _heaps(trace: Trace) -> list[tuple[ProgramHeap | None, str | None, int | None]]:
    """Each `hlo` row's (memory plan, None, program id), in program-id order;
    (None, why, None) for one that cannot be read."""
    found: list[tuple[ProgramHeap | None, str | None, int | None]] = []
    cwd = trace.metadata.cwd
    (ops, _), (stacks, _) = op_stacks(trace), call_stacks(trace)
    for row in hlo_rows(trace):
        if row is None:
            found.append((None, "an hlo row cut short or not of tpumem's form", None))
            continue
        try:
            heap = program_heap(row.data)
        except HloError as error:
            found.append((None, f"{row.origin}: {error}", None))
            continue
        program_id = row.program_id if row.program_id is not None else heap.module_id
        heap = _lines_of_ops(_relative_sources(heap, cwd), ops, stacks)
        found.append((heap, None, program_id))
    found.sort(key=lambda item: -1 if item[2] is None else item[2])
    return found


def _relative_sources(heap: ProgramHeap, cwd: str | None) -> ProgramHeap:
    """Source files named as the trace names them (source_paths.py), as the
    adapters name the lines of the buffers they record, and a buffer XLA puts at
    a library's line at the user's line that called it."""
    if not cwd:
        return heap

    def name(file: str) -> str:
        # Absolute paths only: "<frozen runpy>" and the like are no file's.
        return user_path(file, cwd) if os.path.isabs(file) else file

    def relative(buffer: HeapBuffer) -> HeapBuffer:
        source = buffer.source
        if source:
            file, _, line = source.rpartition(":")
            source = f"{name(file)}:{line}" if file else source
        frames = tuple(replace(frame, file=name(frame.file)) for frame in buffer.frames)
        if source and library_file(source):
            # A library's own line (a Flax or Keras layer's): the user's is the
            # innermost frame of theirs that called into it, where XLA kept one.
            user = [f for f in frames if not library_file(f.file) and not f.file.startswith("<")]
            source = user[-1].location if user else source
        return replace(buffer, source=source, frames=frames)

    return replace(heap, live_at_peak=tuple(relative(b) for b in heap.live_at_peak))


def _lines_of_ops(
    heap: ProgramHeap, ops: dict[str, dict[str, int]], stacks: dict[int, Stack]
) -> ProgramHeap:
    """A TensorFlow function's program with each buffer at the user's line that
    built its op: XLA's metadata names the op and gives TensorFlow's own line,
    and the adapter recorded the op's frames in the function's body (an `op
    stacks` row, by the function's name: the module's, `a_inference_f_12...`,
    is `__inference_f_12`'s, as a name may not begin with "_")."""
    name = short_program_name(heap.module)
    by_op = ops.get("_" + name[1:]) if name.startswith("a_") else None
    if not by_op:
        return heap

    def placed(buffer: HeapBuffer) -> HeapBuffer:
        frames = stacks.get(by_op.get(buffer.op_name, -1), ())
        if not frames:
            return buffer
        return replace(buffer, source=frames[-1].location, frames=frames)

    return replace(heap, live_at_peak=tuple(placed(b) for b in heap.live_at_peak))


@dataclass(frozen=True, slots=True)
class ProgramKinds:
    """The kinds of a program's buffers, as the run's ledger gave the arrays that
    are them: what the same program holds on a TPU is of these kinds (chip_kinds.py)."""

    arguments: tuple[str, ...] = ()  # by argument number
    # Of the outputs the run held at the peak (a launch's, made with it), by
    # (dtype, dims) as XLA prints them, in the plan's order.
    outputs: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RunningAtPeak:
    """A program whose temporaries were live at a device's peak: the peak is the
    live arrays (its arguments and outputs among them) plus its working memory."""

    program: CompiledProgram
    temp_bytes: int  # its temporaries live at the peak, as the trace has them
    # Its buffers' kinds, from the run's ledger (kinds.py).
    kinds: ProgramKinds = ProgramKinds()


def programs_named(op: str, compiled: tuple[CompiledProgram, ...]) -> list[CompiledProgram]:
    """The programs a temp buffer's op names: the program as its framework names
    it (`jit(step)`, PyTorch/XLA's `graph <hash>`), its module's name, or, for
    TensorFlow, which gives the buffers of a jit_compile function's launch no
    region and the function's name (`__inference_step_12`), the module XLA names
    `a_inference_step_12...` (a name may not begin with "_")."""
    module = "a" + op[1:] if op.startswith("_") else op
    found = []
    for program in compiled:
        names = {program.name, program.memory.name if program.memory else None}
        if op in names or f"jit({op})" in names or module == short_program_name(program.name):
            found.append(program)
    return found


def largest_temp(found: tuple[ProgramMemory, ...]) -> ProgramMemory | None:
    with_temp = [p for p in found if p.temp_bytes]
    return max(with_temp, key=lambda p: p.temp_bytes or 0, default=None)


def find_program(found: tuple[CompiledProgram, ...], name: str) -> CompiledProgram | None:
    """The program `name` names: its module's name, XProf's (`jit_step(6)`), the
    framework's (`jit(step)`), or a part of one; the largest when several match."""
    for exact in (True, False):
        for program in found:
            names = [program.name, program.xprof_name, program.memory and program.memory.name]
            if any(name == n if exact else name in n for n in names if n):
                return program
    return None


def beyond_the_peak(memory: tuple[ProgramMemory, ...], peaks: dict[str, int]) -> list[str]:
    """Where a program's own need (XLA's analysis: arguments, outputs, temporaries)
    is far above everything the capture saw on its devices: the capture missed
    what the program used, most likely another framework's memory (one warning,
    the largest program)."""
    if not peaks:
        return []
    recorded = max(peaks.values())
    worst: tuple[int, ProgramMemory] | None = None
    for program in memory:
        need = (
            (program.argument_bytes or 0)
            + (program.output_bytes or 0)
            - (program.alias_bytes or 0)
            + (program.temp_bytes or 0)
        )
        if worst is None or need > worst[0]:
            worst = (need, program)
    if worst is None or worst[0] < max(_DWARFS * recorded, _MISSED_AT_LEAST):
        return []
    need, program = worst
    return [
        f"{short_program_name(program.module or program.name)} needs {format_bytes(need)} "
        f"(XLA's own analysis: arguments, outputs, temporaries), but the largest peak "
        f"recorded is {format_bytes(recorded)}: the capture missed most of what the "
        "program used (was the framework recorded the one that allocates the device "
        "memory? --framework names it)"
    ]


_MISSED_AT_LEAST = 1 << 20  # a program smaller than this is not worth the warning
_DWARFS = 4  # a program needing this many times the peak: the capture missed it
