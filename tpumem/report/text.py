"""The terminal report (rich)."""

from __future__ import annotations

import io
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tpumem.analysis.advisor import RAN_OUT, FitAdvice
from tpumem.analysis.compiled.programs import CompiledProgram
from tpumem.analysis.compiled.sweep import SweepPoint
from tpumem.analysis.compiled.tpu import TpuTarget
from tpumem.analysis.gpus import GpuVerdict
from tpumem.analysis.peak import LiveGroup, highest
from tpumem.analysis.trace_figures import DeviceAnalysis, TraceAnalysis
from tpumem.report import sections
from tpumem.report.answer_rows import answer
from tpumem.report.escapes import markup, visible
from tpumem.report.fit_rows import fit_brief, fit_note, fit_table, fit_title
from tpumem.report.gpu_fit_rows import (
    VERDICT_HEADERS,
    context_note,
    verdict_rows,
    verdict_title,
)
from tpumem.report.gpu_fit_rows import sweep_largest as gpu_sweep_largest
from tpumem.report.gpu_fit_rows import sweep_rows as gpu_sweep_rows
from tpumem.report.growth_rows import GROWTH_HEADERS, GROWTH_TITLE, growth_rows
from tpumem.report.kind_words import KIND_HEADERS
from tpumem.report.live_rows import (
    GROUP_HEADERS,
    STACK_HEADERS,
    STACKS_TITLE,
    group_rows,
    made_unseen,
    stack_rows,
)
from tpumem.report.program_rows import (
    BUFFER_HEADERS,
    PROGRAM_HEADERS,
    TOP_BUFFERS,
    buffer_rows,
    heap_points,
    peak_title,
    program_rows,
    programs_title,
)
from tpumem.report.rows import (
    BRIEF_HEADERS,
    HOW_TO_MARK_STEPS,
    device_rows,
    growth_row,
    sparkline,
)
from tpumem.report.sections import brief_sections, report_sections
from tpumem.report.shorten import at_a_word, from_left, last_parts
from tpumem.report.sweep_tables import frontier_table, sweep_largest, sweep_table
from tpumem.report.tpu_tables import (
    TPU_HEADERS,
    chip_kind_rows,
    tpu_notes,
    tpu_peak_rows,
    tpu_program_rows,
    tpu_title,
    tpu_verdict,
)
from tpumem.trace.metadata import TRACKED
from tpumem.units import format_bytes, format_seconds


def _device(console: Console, device: DeviceAnalysis) -> None:
    console.rule(
        f"[bold]{markup(device.device)}[/] · fidelity: {device.fidelity} · "
        f"{device.allocations:,} allocations, {device.frees:,} frees"
    )
    figures = Table(show_header=False, box=None, pad_edge=False)
    figures.add_column(style="bold")
    figures.add_column(overflow="fold")
    figures.add_column(style="dim", overflow="fold")  # (a long name folds, whole)
    for row in device_rows(device):
        figures.add_row(*_cells(row))
    console.print(figures)
    if device.peak.groups or device.peak.unattributed_bytes:
        _groups(
            console,
            "Live at peak, largest first",
            device.peak.groups,
            device.peak.unattributed_bytes,
            made_unseen(device.peak),
        )
    _stack_table(console, STACKS_TITLE, STACK_HEADERS, stack_rows(device.peak.stacks))
    _stack_table(console, GROWTH_TITLE, GROWTH_HEADERS, growth_rows(device.growth))
    line = device.timeline
    if line.in_use_max:
        top = format_bytes(max(line.in_use_max))
        marks = console.width - 16 - len(f"  max {top}")  # (16: the label's columns)
        console.print(f"Bytes in use    {sparkline(line.in_use_max, width=marks)}  max {top}")
        if any(v is not None for v in line.fragmentation_max):
            frag = sparkline(line.fragmentation_max, top=1.0, width=marks)
            console.print(f"Fragmentation   {frag}  0..1")
        console.print(
            f"                {format_seconds(line.start_ns)} … {format_seconds(line.end_ns)}",
            style="dim",
        )


def _stack_table(console: Console, title: str, headers: tuple[str, ...], rows: list) -> None:
    """Figures and a call stack per row, its frames one per line."""
    if not rows:
        return
    table = Table(title=Text(visible(title)), title_justify="left")
    for header in headers:
        table.add_column(header, justify="left" if header == headers[-1] else "right")
    for *figures, frames in rows:
        table.add_row(*figures, Text("\n".join(visible(f) for f in frames)))
    console.print(table)


def _groups(
    console: Console,
    title: str,
    groups: tuple[LiveGroup, ...],
    unseen_bytes: int = 0,
    unseen_where: str = "",
) -> None:
    rows = group_rows(groups, unseen_bytes, unseen_where)
    console.print(_fitted_table(title, GROUP_HEADERS, rows, console.width))


def _cells(row: tuple[str, ...]) -> list[Text]:
    """Cells as plain text: what a trace named shows as it is, never as markup."""
    return [Text(visible(cell)) for cell in row]


# Columns whose long values are cut where they stay told apart (shorten.py);
# rich would wrap them or cut their ends, the file:line or the op's own name.
# A shape keeps its dimensions (`…[512,128]`), cut from the left as a path.
_CUT = {"source": from_left, "line": from_left, "op": last_parts, "shape": from_left}
_CUT_FLOORS = {"source": 14, "line": 14, "op": 10, "shape": 10}  # narrowed no further
# A row of one line cuts its words at a word (shorten.at_a_word).
_WORDS = ("what", "how it is known")
_FLOOR = 8  # nor another column
_LEAST = 3  # where even the floors do not fit: a column keeps this many
# Right-justified where a table is made here, and never narrowed.
_NUMBERS = ("bytes", "buffers", "share")
# Never narrowed either: a word cut short would say something else ("optimizer sta…").
_WHOLE = ("kind",)


def _fitted_table(
    title: str, headers: tuple[str, ...], rows: list, width: int, one_line: bool = False
) -> Table:
    """A table of plain-text cells that fits `width`: where it would not, the
    columns are narrowed from their natural widths towards a floor (_FLOOR, or
    _CUT_FLOORS'), the others first, in proportion, then the cut ones, and held
    at those widths (rich's own narrowing cuts the ends of paths); a cut
    column's values are cut to it (shorten.py), the others' wrapped at spaces
    or ended in an ellipsis (`one_line`: every cell ends in an ellipsis, no
    row takes two lines, and no box but the header's rule: the first screen's
    lines are few)."""
    table = Table(title=Text(visible(title)), title_justify="left")
    if one_line:
        table = Table(
            title=Text(visible(title)),
            title_justify="left",
            box=box.SIMPLE_HEAD,
            show_edge=False,
            pad_edge=False,
            collapse_padding=True,
        )
    rows = [tuple(visible(cell) for cell in row) for row in rows]
    natural = [
        max(cell_len(header), *(cell_len(row[i]) for row in rows)) if rows else len(header)
        for i, header in enumerate(headers)
    ]
    # (What the borders and padding take: 3 a column and 1 boxed; 2 a column less
    # 2 with one rule under the header and padding collapsed, `one_line`.)
    available = width - (2 * len(headers) - 2 if one_line else 3 * len(headers) + 1)
    widths: list[int | None] = [None] * len(headers)
    if sum(natural) > available:
        floor = [
            n if h in _NUMBERS or h in _WHOLE else min(n, _CUT_FLOORS.get(h, _FLOOR))
            for n, h in zip(natural, headers, strict=True)
        ]
        flexible = [i for i, h in enumerate(headers) if h not in _NUMBERS and h not in _WHOLE]
        room = available - sum(f for i, f in enumerate(floor) if i not in flexible)
        if sum(floor[i] for i in flexible) > room:
            # Not even the floors fit: the numbers keep their width, the other
            # columns share what is left in proportion to their floors.
            scale = max(0, room) / max(1, sum(floor[i] for i in flexible))
            for i in flexible:
                floor[i] = max(_LEAST, int(floor[i] * scale))
        narrowed = list(natural)
        # The other columns first (rich wraps their text), then the cut ones.
        for cut in (False, True):
            columns = [i for i, h in enumerate(headers) if (h in _CUT) == cut]
            excess = sum(narrowed) - available
            room = sum(narrowed[i] - floor[i] for i in columns)
            if excess <= 0 or not room:
                continue
            share = min(1.0, excess / room)
            for i in columns:
                narrowed[i] -= -int(-(narrowed[i] - floor[i]) * share // 1)
        widest = max(range(len(headers)), key=lambda i: natural[i])
        narrowed[widest] += max(0, available - sum(narrowed))  # what rounding left
        widths = list(narrowed)
    for i, header in enumerate(headers):
        table.add_column(
            header,
            justify="right" if header in _NUMBERS else "left",
            width=widths[i],
            overflow="ellipsis",
            no_wrap=one_line,
        )
    for row in rows:
        table.add_row(
            *(Text(_cut(headers[i], cell, widths[i], one_line)) for i, cell in enumerate(row))
        )
    return table


def _cut(header: str, cell: str, width: int | None, one_line: bool) -> str:
    if width is None:
        return cell
    if header in _CUT:
        return _CUT[header](cell, width)
    return at_a_word(cell, width) if one_line and header in _WORDS else cell


# The answer-only report fits a screen of 80 x 40 (with the prompt's line): it
# shows the most of the largest lines (the rest in a row of their own) and of
# the first changes that fits, in this order of preference.
SCREEN_LINES = 40 - 1
BRIEF_BOUNDS = ((5, 3), (5, 2), (3, 2), (3, 1), (2, 1))


@dataclass(frozen=True, slots=True)
class _Bounds:
    lines: int | None = None  # the lines table's rows (None: answer_rows.TOP_LINES)
    changes: int | None = None  # the changes shown (None: every one)
    brief: bool = False  # each row one line, no figure's how beside a change


def _answer(console: Console, analysis: TraceAnalysis, bounds: _Bounds = _Bounds()) -> None:
    """The first screen: the peak, its kinds and lines, what to change. `brief`:
    each row one line (the rest ends in an ellipsis), and the top of each list."""
    brief = bounds.brief
    said = answer(analysis, top_lines=bounds.lines)
    if said is None:
        return
    console.print(Text(visible(said.headline), style="bold"))
    for verdict in said.verdicts:
        console.print(Text(visible(verdict), style="bold"))
    for table in said.tables:
        console.print(_fitted_table(table.title, table.headers, table.rows, console.width, brief))
    for note in said.notes:
        console.print(Text(visible(note)), style="dim")
    if brief:  # (in full, a row of the device's figures)
        device = highest(analysis.devices)
        title, value, _ = growth_row(device)
        if device.growth is None:
            value += "; " + HOW_TO_MARK_STEPS
        # (A tracked block, a cell or a test, is seldom a loop of steps to mark.)
        if device.growth is not None or analysis.metadata.source != TRACKED:
            console.print(Text(f"{title}: {visible(value)}"))
    if said.changes:
        changes = said.changes[: bounds.changes] if bounds.changes else said.changes
        _changes(console, (said.changes_title, changes), brief)
        if len(said.changes) > len(changes):
            console.print(f"({len(said.changes) - len(changes)} more with --full)", style="dim")


def _changes(
    console: Console, section: tuple[str, list[tuple[str, str, str]]], brief: bool = False
) -> None:
    """What to change: each figure, its sentence, how the figure is known (with
    --full: on the terminal's first screen, the sentence alone)."""
    title, changes = section
    console.print(Text(title, style="bold"))
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column(overflow="fold")  # (a long path folds whole, never cut)
    for figure, sentence, how in changes:
        words = Text(visible(sentence))
        if not brief:
            words.append(f" ({visible(how)})", style="dim")
        grid.add_row(Text(figure, style="bold"), words)
    console.print(grid)


def _fit_brief(console: Console, fit: FitAdvice) -> None:
    """The fit table in a line, and what qualifies every answer in it (a run that
    ran out shows what it needs at the least); the other notes with --full."""
    console.print(Text(visible(fit_brief(fit))))
    for note in fit.notes:
        if note.kind == RAN_OUT:
            console.print(Text(visible(fit_note(note))), style="dim")


def _more(console: Console, path: str) -> None:
    """What --full adds, and the command, whole on a line of its own (copied as is)."""
    console.print(
        "--full adds the run, how each figure is known, buffers, stacks, the timeline:",
        style="dim",
    )
    console.print(Text(f"  tpumem report {shlex.quote(visible(path))} --full"), soft_wrap=True)


def string_console(width: int, color: bool) -> tuple[Console, io.StringIO]:
    """A console that renders into a string. Never the notebook's own: in a Jupyter
    kernel rich would otherwise show each print as an output of the cell."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        color_system="standard" if color else None,
        highlight=False,
        force_jupyter=False,
    )
    return console, buffer


def render_text(
    analysis: TraceAnalysis, *, width: int = 100, color: bool = False, full: bool = True
) -> str:
    """The report; `full` False: the answer alone (sections.brief_sections)."""
    console, buffer = string_console(width, color)
    # (One line whatever its length: a path is copied whole.)
    console.print(f"[bold]tpumem report[/] · {markup(analysis.path or '')}", soft_wrap=True)
    if full:
        for section in report_sections(analysis):
            _SECTIONS[section.kind](console, section.value)
        return buffer.getvalue()
    head = buffer.getvalue()
    for lines, changes in BRIEF_BOUNDS:  # (the first that fits the screen, else the last)
        console, buffer = string_console(width, color)
        bounds = _Bounds(lines, changes, brief=True)
        for section in brief_sections(analysis):
            if section.kind == sections.ANSWER:
                _answer(console, section.value, bounds)
            else:
                _SECTIONS[section.kind](console, section.value)
        text = head + buffer.getvalue()
        if text.count("\n") <= SCREEN_LINES:
            break
    return text


def _run(console: Console, rows: list[tuple[str, ...]]) -> None:
    header = Table(show_header=False, box=None, pad_edge=False)
    header.add_column(style="bold")
    header.add_column()
    for row in rows:
        header.add_row(*_cells(row))
    console.print(header)


def _warnings(console: Console, warnings: tuple[str, ...]) -> None:
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {markup(warning)}")


def _other_devices(console: Console, brief: list[tuple[str, ...]]) -> None:
    table = Table(title="Other devices, largest peak first", title_justify="left")
    for name in BRIEF_HEADERS:
        table.add_column(name, justify="left" if name == "device" else "right")
    for device_row in brief:
        table.add_row(*_cells(device_row))
    console.print(table)


def _tpu(console: Console, target: TpuTarget) -> None:
    verdict = tpu_verdict(target)
    if verdict is not None:
        fits = target.fit is not None and target.fit.fits
        console.print(Text(visible(verdict), style="bold green" if fits else "bold red"))
    _table(console, tpu_title(target), TPU_HEADERS, tpu_program_rows(target))
    kinds = chip_kind_rows(target)
    if kinds is not None:
        _table(console, kinds[0], KIND_HEADERS, kinds[1])
    peak = tpu_peak_rows(target)
    if peak is not None:
        _table(console, peak[0], BUFFER_HEADERS, peak[1])
    for note in tpu_notes(target):
        # Line by line: XLA's own message has lines of its own, each shown as it is.
        console.print(Text("\n".join(visible(line) for line in note.splitlines())), style="dim")


def _table(console: Console, title: str, headers: tuple[str, ...], rows: list) -> None:
    console.print(_fitted_table(title, headers, rows, console.width))


def render_sweep_text(
    names: tuple[str, ...],
    slices: list[str],
    points: list[SweepPoint],
    *,
    width: int = 100,
    color: bool = False,
) -> str:
    """`tpumem fit --sweep`: each combination's answer on each slice, then the
    largest value of the first argument that fits each (per combination of the
    others, where there are others)."""
    console, buffer = string_console(width, color)
    _table(console, *sweep_table(names, slices, points))
    if len(names) > 1:
        _table(console, *frontier_table(names, slices, points))
    else:
        for line in sweep_largest(names, slices, points):
            console.print(Text(visible(line)))
    return buffer.getvalue()


def render_gpu_verdicts(
    verdicts: list[GpuVerdict], steps: int, *, width: int = 100, color: bool = False
) -> str:
    """`tpumem fit --gpu`: each GPU's verdict."""
    console, buffer = string_console(width, color)
    _table(console, verdict_title(steps), VERDICT_HEADERS, verdict_rows(verdicts))
    console.print(Text(context_note()))
    return buffer.getvalue()


def render_gpu_sweep(
    name: str,
    gpus: list[str],
    rows: list[tuple[str, list[GpuVerdict] | None]],
    skipped_by: str,
    *,
    width: int = 100,
    color: bool = False,
) -> str:
    """`tpumem fit --gpu --sweep`: each value's peak and verdicts, then the
    largest value that fits each GPU."""
    console, buffer = string_console(width, color)
    headers, table = gpu_sweep_rows(name, rows, gpus, skipped_by)
    _table(console, f"--{name} on fake tensors: each GPU's verdict", headers, table)
    for line in gpu_sweep_largest(name, rows, gpus):
        console.print(Text(visible(line)))
    console.print(Text(context_note()))
    return buffer.getvalue()


def _programs(console: Console, compiled: tuple[CompiledProgram, ...]) -> None:
    _table(console, programs_title(compiled), PROGRAM_HEADERS, program_rows(compiled))
    top = next((p for p in compiled if p.heap is not None), None)
    if top is not None:
        _program_peak(console, top, limit=TOP_BUFFERS)


def _program_peak(console: Console, program: CompiledProgram, limit: int | None) -> None:
    heap = program.heap
    assert heap is not None
    _table(console, peak_title(program), BUFFER_HEADERS, buffer_rows(heap, limit))
    points = heap_points(heap)
    top = f"  max {format_bytes(heap.peak_bytes)}"
    marks = console.width - len("Heap over program order ") - len(top)
    console.print(f"Heap over program order {sparkline(points, width=marks)}{top}")


def render_program_text(
    program: CompiledProgram,
    *,
    width: int = 100,
    color: bool = False,
    analysis: TraceAnalysis | None = None,
) -> str:
    """One program in full: `tpumem report --program NAME`."""
    console, buffer = string_console(width, color)
    console.print(f"[bold]tpumem report[/] · program {markup(program.name)}")
    _table(console, programs_title((program,)), PROGRAM_HEADERS, program_rows((program,)))
    if program.heap is not None:
        _program_peak(console, program, limit=None)
    return buffer.getvalue()


def _fit(console: Console, fit: FitAdvice) -> None:
    table = Table(
        title=markup(fit_title(fit.device)),
        title_justify="left",
    )
    headers, rows = fit_table(fit)
    for index, header in enumerate(headers):
        # (a setting is one word, a call or NAME=value: folded, never cut short)
        table.add_column(header, overflow="fold" if index == 2 else "ellipsis")
    for row in rows:
        table.add_row(*_cells(row))
    console.print(table)
    for note in fit.notes:
        console.print(f"[dim]{markup(fit_note(note))}[/]")


# How the terminal shows each kind of section (report/sections.py orders them).
_SECTIONS: dict[str, Callable[[Console, Any], None]] = {
    sections.ANSWER: _answer,
    sections.HEADLINE: _run,
    sections.RUN: _run,
    sections.FAILURE: lambda console, table: _groups(console, *table),
    sections.WARNINGS: _warnings,
    sections.NO_EVENTS: lambda console, text: console.print(text),
    sections.LEFT_OUT: lambda console, note: console.print(note, style="dim"),
    sections.DEVICE: _device,
    sections.OTHER_DEVICES: _other_devices,
    sections.PROGRAMS: _programs,
    sections.TPU: _tpu,
    sections.CHANGES: _changes,
    sections.FIT: _fit,
    sections.FIT_BRIEF: _fit_brief,
    sections.MORE: _more,
}
