"""The peak by line: the bytes live at a device's peak by the source line that
made them, and by call stack, with each compiled program running there opened up.

A program's working memory is one allocation to the run (a `temp` buffer named
after the program): the line that holds it is the call that ran the program,
which says nothing of what inside the program needs the memory. XLA's buffer
assignment says: the temporaries live at the program's own peak (program_heap.py),
each at the line XLA's metadata gives it. Those stand in for the program's
allocation here, each under the Python stack of the call, after a frame for the
program and the frames XLA kept inside it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis.compiled.program_heap import TEMPORARY, HeapBuffer
from tpumem.analysis.compiled.programs import CompiledProgram, programs_named
from tpumem.analysis.device_events import DeviceEvents
from tpumem.analysis.stacks import NO_STACK, StackBytes, stack_bytes
from tpumem.trace.model import Trace
from tpumem.trace.source_paths import library_file
from tpumem.trace.stack_rows import Frame, Stack, call_stacks

TOP_OPS = 3  # ops named per line, most bytes first
# Why a program was not opened: no buffer assignment of it in the trace, or one
# with no temporary live at its peak.
NO_PLAN, NO_TEMPORARIES = "no plan", "no temporaries at its peak"
# The program's frame in a stack: where no call stack was recorded, it stands alone.
NO_CALL = "(compiled program)"


@dataclass(frozen=True, slots=True)
class LineBytes:
    """Bytes live at the peak that one line made."""

    line: str | None  # file:line; None where neither the run nor XLA names one
    bytes: int
    buffers: int
    program: str | None  # the program whose temporaries these are; None: the run's arrays
    ops: tuple[str, ...]  # the ops that made them, most bytes first
    # A program's temporary allocation beyond the buffers its peak holds (XLA's
    # packing): the program's, at no line.
    unplaced: bool = False
    regions: tuple[str, ...] = ()  # the regions the adapter gave them, most bytes first
    # A program's temporaries XLA's metadata names no line for (PyTorch/XLA's,
    # copies XLA added): at the line of the call that ran the program.
    at_call: bool = False


@dataclass(frozen=True, slots=True)
class OpenedProgram:
    """A program whose temporaries were live at the peak, and how they were opened."""

    name: str  # as the reports name it
    call: str | None  # the line that ran it (file:line), as the run recorded it
    temp_bytes: int  # its temporaries live at the peak, as the run recorded them
    planned_bytes: int  # XLA's plan: temporaries live at the program's own peak
    opened: bool  # False: not opened (`why`); the call's line holds its temporaries
    why: str = ""  # NO_PLAN or NO_TEMPORARIES where not opened

    @property
    def rest_bytes(self) -> int:
        """Where the plan holds less than the run recorded: the allocation's bytes
        no buffer held at the program's peak (XLA's packing); a line of its own."""
        return max(0, self.temp_bytes - self.planned_bytes) if self.opened else 0

    @property
    def scale(self) -> float:
        """Where the plan holds more than the run recorded (a framework that gives
        its temp size to a precision): what each buffer is scaled by to the total."""
        return min(1.0, self.temp_bytes / self.planned_bytes) if self.opened else 1.0


@dataclass(frozen=True, slots=True)
class PeakLines:
    lines: tuple[LineBytes, ...]  # largest first
    stacks: tuple[StackBytes, ...]  # the peak's call stacks, programs opened up
    programs: tuple[OpenedProgram, ...]


@dataclass(frozen=True, slots=True)
class ProgramsAtPeak:
    """Which of the peak's allocations hold a compiled program's temporaries."""

    program_of: np.ndarray  # per live allocation: an index into `found`, -1 for the rest
    found: tuple[CompiledProgram, ...]
    temp_bytes: tuple[int, ...] = ()  # each found program's, as the run recorded them


def programs_at_peak(
    trace: Trace, events: DeviceEvents, live: np.ndarray, compiled: tuple[CompiledProgram, ...]
) -> ProgramsAtPeak:
    """A `temp` buffer, or one of no region, named after a program (programs.py's
    rule: programs_named) holds that program's temporaries; of programs of one
    name (a step compiled again), the one whose planned temporaries come nearest
    the bytes the run recorded for it. Each distinct op is looked up once."""
    rows = events.row[live]
    op_codes, op_values = trace.codes_at("op", rows)
    region_codes, region_values = trace.codes_at("region", rows)
    temp = [-1, *(i for i, name in enumerate(region_values) if name == "temp")]
    candidates = np.isin(region_codes, temp) & (op_codes >= 0)
    program_of = np.full(len(rows), -1, np.int64)
    if not candidates.any():
        return ProgramsAtPeak(program_of, ())
    codes, inverse = np.unique(op_codes[candidates], return_inverse=True)
    recorded = np.bincount(inverse, weights=events.bytes[live][candidates])
    found: list[CompiledProgram] = []
    index_of_code = np.full(len(codes), -1, np.int64)
    for k, code in enumerate(codes.tolist()):
        named = programs_named(op_values[code], compiled)
        if named:
            program = min(named, key=lambda p: abs(_planned_temp(p) - recorded[k]))
            if program not in found:
                found.append(program)
            index_of_code[k] = found.index(program)
    program_of[candidates] = index_of_code[inverse]
    held = program_of >= 0
    temps = np.bincount(program_of[held], weights=events.bytes[live][held], minlength=len(found))
    return ProgramsAtPeak(program_of, tuple(found), tuple(temps.astype(np.int64).tolist()))


def _planned_temp(program: CompiledProgram) -> int:
    if program.heap is not None:
        return program.heap.total_allocation_bytes - program.heap.whole_program_bytes
    return (program.memory.temp_bytes or 0) if program.memory is not None else 0


def peak_lines(
    trace: Trace, events: DeviceEvents, live: np.ndarray, running: ProgramsAtPeak
) -> PeakLines:
    """The allocations `live` (indices into `events`, the peak's) by line and by
    stack, the temporaries of each program among them opened up."""
    if not len(live):
        return PeakLines((), (), ())
    rows = events.row[live]
    op_codes, op_values = trace.codes_at("op", rows)
    source_codes, source_values = trace.codes_at("source", rows)
    region_codes, region_values = trace.codes_at("region", rows)
    sizes = events.bytes[live]
    program_of = running.program_of
    arrays = program_of < 0
    lines = _array_lines(
        source_codes[arrays],
        source_values,
        (op_codes[arrays], op_values),
        (region_codes[arrays], region_values),
        sizes[arrays],
    )
    stacks = list(stack_bytes(trace, events, live[arrays]))
    opened = []
    known_stacks, _ = call_stacks(trace)
    stack_ids = trace.numbers_at("stack", rows, -1)
    order = np.argsort(program_of, kind="stable")
    bounds = np.searchsorted(program_of[order], np.arange(len(running.found) + 1))
    for index, program in enumerate(running.found):
        mine = order[bounds[index] : bounds[index + 1]]
        # The call that ran it: the stack and line holding most of its bytes.
        largest = mine[int(np.argmax(sizes[mine]))]
        call_stack = known_stacks.get(int(stack_ids[largest]), NO_STACK)
        source = int(source_codes[largest])
        call = source_values[source] if source >= 0 else None
        program_lines, program_stacks, how = _open(
            program, running.temp_bytes[index], len(mine), call, call_stack
        )
        lines += program_lines
        stacks += program_stacks
        opened.append(how)
    return PeakLines(
        lines=tuple(sorted(lines, key=lambda x: (-x.bytes, x.line or "", x.program or ""))),
        stacks=_merged(stacks),
        programs=tuple(sorted(opened, key=lambda p: -p.temp_bytes)),
    )


def _array_lines(
    sources: np.ndarray,
    source_values: list[str],
    ops: tuple[np.ndarray, list[str]],
    regions: tuple[np.ndarray, list[str]],
    sizes: np.ndarray,
) -> list[LineBytes]:
    """The run's own buffers, by the line the trace gives each, with the ops
    that made them and the regions the adapter gave them (sorts, no pass per line)."""
    if not len(sources):
        return []
    codes, line_of, counts = np.unique(sources, return_inverse=True, return_counts=True)
    totals = np.bincount(line_of, weights=sizes).astype(np.int64)
    op_names = _named_by_group(line_of, len(codes), *ops, sizes)
    region_names = _named_by_group(line_of, len(codes), *regions, sizes)
    return [
        LineBytes(
            line=source_values[code] if code >= 0 else None,
            bytes=int(totals[k]),
            buffers=int(counts[k]),
            program=None,
            ops=op_names[k],
            regions=region_names[k],
        )
        for k, code in enumerate(codes.tolist())
    ]


def _named_by_group(
    group: np.ndarray, groups: int, codes: np.ndarray, values: list[str], sizes: np.ndarray
) -> list[tuple[str, ...]]:
    """For each group, the names its `codes` give, most bytes first (TOP_OPS)."""
    named = codes >= 0
    found: list[dict[str, int]] = [{} for _ in range(groups)]
    if named.any():
        width = len(values) + 1
        pairs = group[named].astype(np.int64) * width + codes[named]
        unique, inverse = np.unique(pairs, return_inverse=True)
        totals = np.bincount(inverse, weights=sizes[named]).astype(np.int64)
        for pair, total in zip(unique.tolist(), totals.tolist(), strict=True):
            k, code = divmod(pair, width)
            found[k][values[code]] = total
    return [_largest(by_name) for by_name in found]


def _largest(by_op: dict[str, int]) -> tuple[str, ...]:
    return tuple(op for op, _ in sorted(by_op.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_OPS])


def _open(
    program: CompiledProgram, temp_bytes: int, buffers: int, call: str | None, call_stack: Stack
) -> tuple[list[LineBytes], list[StackBytes], OpenedProgram]:
    name = program.shown_name
    here = _program_frame(name, call_stack)
    temps = [b for b in program.heap.live_at_peak if b.group == TEMPORARY] if program.heap else []
    planned = sum(b.bytes for b in temps)
    if not temps:
        why = NO_PLAN if program.heap is None else NO_TEMPORARIES
        how = OpenedProgram(name, call, temp_bytes, 0, opened=False, why=why)
        line = LineBytes(call, temp_bytes, buffers, name, ())
        return [line], [StackBytes(here, temp_bytes, buffers)], how
    scale = min(1.0, temp_bytes / planned)
    shares = _scaled([b.bytes for b in temps], scale)
    rest = temp_bytes - sum(shares)
    by_line: dict[tuple[str | None, bool], tuple[int, int, dict[str, int]]] = {}
    by_stack: dict[Stack, tuple[int, int]] = {}
    for buffer, share in zip(temps, shares, strict=True):
        # A line in a library (TensorFlow's own, where no op stack placed it) is
        # none of the user's: at the call, as a buffer XLA names no line for.
        inside = bool(buffer.source) and not library_file(buffer.source or "")
        where = (buffer.source, False) if inside else (call, True)
        total, count, ops = by_line.get(where, (0, 0, {}))
        op = buffer.short_op or buffer.opcode
        ops[op] = ops.get(op, 0) + share
        by_line[where] = (total + share, count + 1, ops)
        frames = here + _inside(buffer, call_stack)
        total, count = by_stack.get(frames, (0, 0))
        by_stack[frames] = (total + share, count + 1)
    lines = [
        LineBytes(line, total, count, name, _largest(ops), at_call=at_call)
        for (line, at_call), (total, count, ops) in by_line.items()
    ]
    stacks = [StackBytes(frames, total, count) for frames, (total, count) in by_stack.items()]
    if rest:
        lines.append(LineBytes(None, rest, 0, name, (), unplaced=True))
        stacks.append(StackBytes(here, rest, 0))
    how = OpenedProgram(name, call, temp_bytes, planned, opened=True)
    return lines, stacks, how


def _scaled(sizes: list[int], scale: float) -> list[int]:
    """Sizes times `scale` (at most 1) in whole bytes, summing to the scaled total."""
    if scale >= 1.0:
        return sizes
    scaled = [int(size * scale) for size in sizes]
    short = round(sum(sizes) * scale) - sum(scaled)
    for index in sorted(range(len(sizes)), key=lambda i: -sizes[i])[: max(0, short)]:
        scaled[index] += 1
    return scaled


def _program_frame(name: str, call_stack: Stack) -> Stack:
    """The call's frames, then the program's: at the call's line (its code too, so
    that a diff matches it where the line moved), named after it."""
    if not call_stack:
        return (Frame(NO_CALL, 0, name),)
    call = call_stack[-1]
    return (*call_stack, Frame(call.file, call.line, name, call.code))


def _inside(buffer: HeapBuffer, call_stack: Stack) -> Stack:
    """The frames XLA kept for a buffer's instruction below the call that ran the
    program: JAX's are the whole traceback when the program was traced, through
    the same call, so what follows the call's own frame is inside the program.
    Where the call is not among them (traced from another call), the innermost
    frame alone; without frames, the metadata's line."""
    frames = buffer.frames
    if call_stack and frames:
        call = call_stack[-1]
        for index in range(len(frames) - 1, -1, -1):
            if frames[index].file == call.file and frames[index].line == call.line:
                return frames[index + 1 :]
        return frames[-1:]
    if frames:
        return frames[-1:]
    if buffer.source:
        file, _, line = buffer.source.rpartition(":")
        if line.isdigit():
            return (Frame(file, int(line), buffer.short_op or buffer.opcode),)
    return ()


def _merged(stacks: list[StackBytes]) -> tuple[StackBytes, ...]:
    """Stacks of the same frames as one, largest first."""
    merged: dict[Stack, tuple[int, int]] = {}
    for stack in stacks:
        total, count = merged.get(stack.frames, (0, 0))
        merged[stack.frames] = (total + stack.bytes, count + stack.buffers)
    ordered = sorted(merged.items(), key=lambda kv: (-kv[1][0], [f.location for f in kv[0]]))
    return tuple(StackBytes(frames, total, count) for frames, (total, count) in ordered)
