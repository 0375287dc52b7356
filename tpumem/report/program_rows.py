"""Compiled programs in words: the largest programs and what fills each at its
peak, as rows every format shows (text, md; the page draws the same data)."""

from __future__ import annotations

import itertools
import os
from collections import Counter

from tpumem.analysis.compiled.program_heap import HeapBuffer, ProgramHeap
from tpumem.analysis.compiled.programs import CompiledProgram
from tpumem.units import counted, format_bytes

TOP_PROGRAMS = 5  # programs listed in a report
TOP_BUFFERS = 8  # buffers listed for a program's peak in a report (--program: all)
SPARK_POINTS = 60  # heap over program order, as characters

PROGRAM_HEADERS = ("program", "peak", "arguments", "outputs", "temps at peak", "peak at")
BUFFER_HEADERS = ("bytes", "kind", "shape", "source", "op", "instruction")
# After a buffer's bytes when its layout pads it ({}: the padding).
PADDING_SUFFIX = " (+{} padding)"
SOURCE = "XLA's buffer assignment, at compile time"


def programs_title(compiled: tuple[CompiledProgram, ...]) -> str:
    with_heap = sum(1 for p in compiled if p.heap is not None)
    shown = min(len(compiled), TOP_PROGRAMS)
    more = f", the {shown} largest shown" if len(compiled) > shown else ""
    programs = counted(len(compiled), "program")
    return f"Compiled programs: what fills each ({programs}, {with_heap:,} with {SOURCE}{more})"


def distinct_names(compiled: tuple[CompiledProgram, ...]) -> list[str]:
    """Each program's name as the table shows it: one that several programs share
    (a function compiled again, for other shapes or devices) with XLA's id of the
    program, else its place among them."""
    counts = Counter(program.shown_name for program in compiled)
    seen: Counter[str] = Counter()
    names = []
    for program in compiled:
        name = program.shown_name
        seen[name] += 1
        if counts[name] > 1:
            tag = f"id {program.program_id}" if program.program_id is not None else seen[name]
            name = f"{name} ({tag})"
        names.append(name)
    return names


def program_rows(
    compiled: tuple[CompiledProgram, ...], limit: int = TOP_PROGRAMS
) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    names = distinct_names(compiled)
    for program, name in zip(compiled[:limit], names, strict=False):
        heap, memory = program.heap, program.memory
        if heap is not None:
            rows.append(
                (
                    name,
                    format_bytes(heap.peak_bytes),
                    format_bytes(heap.parameter_bytes),
                    format_bytes(heap.output_bytes),
                    format_bytes(heap.temp_peak_bytes),
                    heap.peak_instruction or "-",
                )
            )
        elif memory is not None:
            rows.append(
                (
                    name,
                    format_bytes(program.peak_bytes),
                    format_bytes(memory.argument_bytes),
                    format_bytes(memory.output_bytes),
                    format_bytes(memory.temp_bytes),
                    "- (no HLO: XLA's totals only)",
                )
            )
        else:
            rows.append((name, "-", "-", "-", "-", program.hlo_problem or "-"))
    return rows


def peak_title(program: CompiledProgram) -> str:
    heap = program.heap
    assert heap is not None
    where = f" at {heap.peak_instruction}" if heap.peak_instruction else ""
    return (
        f"{program.shown_name}: {format_bytes(heap.peak_bytes)} at its peak{where}, "
        f"{format_bytes(heap.whole_program_bytes)} of it live the whole program "
        "(arguments, outputs, constants); largest first"
    )


# Where the buffers past a table's rows are: a run's program (report --program)
# and a program compiled for a TPU (the JSON report's heap).
MORE_OF_A_PROGRAM = "(--program NAME lists them all)"
MORE_ON_A_TPU = "(-f json lists them all)"


def buffer_rows(
    heap: ProgramHeap, limit: int | None = TOP_BUFFERS, more: str = MORE_OF_A_PROGRAM
) -> list[tuple[str, ...]]:
    """The buffers live at the program's peak, largest first; past `limit`, one
    row for the rest, saying where they are (`more`)."""
    shown = heap.live_at_peak if limit is None else heap.live_at_peak[:limit]
    rows = [_buffer_row(buffer) for buffer in shown]
    rest = heap.live_at_peak[len(shown) :]
    if rest:
        rows.append(
            (
                format_bytes(sum(b.bytes for b in rest)),
                f"{len(rest):,} more",
                "-",
                "-",
                more,
                "-",
            )
        )
    return rows


def _buffer_row(buffer: HeapBuffer) -> tuple[str, ...]:
    padding = ""
    if buffer.padding_bytes:
        padding = PADDING_SUFFIX.format(format_bytes(buffer.padding_bytes))
    return (
        format_bytes(buffer.bytes) + padding,
        buffer.group,
        buffer.short_shape,
        # A file by its name (the JSON has the path).
        os.path.basename(buffer.source) if buffer.source else "-",
        buffer.short_op or "-",
        buffer.instruction,
    )


def heap_points(heap: ProgramHeap, points: int = SPARK_POINTS) -> tuple[int, ...]:
    """The heap over program order in `points` steps, each the most in its stretch."""
    sizes = heap.heap_bytes
    if len(sizes) <= points:
        return sizes
    edges = [round(i * len(sizes) / points) for i in range(points + 1)]
    return tuple(max(sizes[a:b]) for a, b in itertools.pairwise(edges))
