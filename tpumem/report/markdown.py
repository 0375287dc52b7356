"""The markdown report: the same rows as the terminal, as tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tpumem.analysis.advisor import FitAdvice
from tpumem.analysis.compiled.programs import CompiledProgram
from tpumem.analysis.compiled.tpu import TpuTarget
from tpumem.analysis.peak import LiveGroup
from tpumem.analysis.trace_figures import DeviceAnalysis, TraceAnalysis
from tpumem.report import sections
from tpumem.report.answer_rows import answer
from tpumem.report.escapes import markdown as _cell
from tpumem.report.fit_rows import fit_note, fit_table, fit_title
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
from tpumem.report.rows import BRIEF_HEADERS, device_rows, sparkline
from tpumem.report.sections import report_sections
from tpumem.report.tpu_tables import (
    TPU_HEADERS,
    chip_kind_rows,
    tpu_notes,
    tpu_peak_rows,
    tpu_program_rows,
    tpu_title,
    tpu_verdict,
)


def md_table(headers: tuple[str, ...], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def render_markdown(analysis: TraceAnalysis, *, width: int = 100, color: bool = False) -> str:
    """(Width and color are the terminal's: markdown has neither.)"""
    lines = [f"# tpumem report: {_cell(analysis.path or '')}", ""]
    for section in report_sections(analysis):
        lines += _SECTIONS[section.kind](section.value)
    return "\n".join(lines) + "\n"


def _answer(analysis: TraceAnalysis) -> list[str]:
    said = answer(analysis)
    if said is None:
        return []
    lines = [f"**{_cell(said.headline)}**", ""]
    lines += [line for verdict in said.verdicts for line in (f"**{_cell(verdict)}**", "")]
    for table in said.tables:
        lines += [f"{_cell(table.title)}:", "", *md_table(table.headers, table.rows), ""]
    lines += [line for note in said.notes for line in (f"> {_cell(note)}", "")]
    if said.changes:
        lines += _changes((said.changes_title, said.changes))
    return lines


def _changes(section: tuple[str, list[tuple[str, str, str]]]) -> list[str]:
    title, changes = section
    lines = [f"{title}:", ""]
    lines += [
        f"- **{_cell(figure)}** {_cell(sentence)} ({_cell(how)})"
        for figure, sentence, how in changes
    ]
    return [*lines, ""]


def _failure(table: tuple[str, tuple[LiveGroup, ...]]) -> list[str]:
    title, groups = table
    return ["", f"{_cell(title)}:", "", *md_table(GROUP_HEADERS, group_rows(groups))]


def _device(device: DeviceAnalysis) -> list[str]:
    lines = ["", f"## {_cell(device.device)} (fidelity: {device.fidelity})", ""]
    lines += md_table(("figure", "value", "how"), device_rows(device))
    peak = device.peak
    live_rows = group_rows(peak.groups, peak.unattributed_bytes, made_unseen(peak))
    if live_rows:
        lines += ["", "Live at peak, largest first:", ""]
        lines += md_table(GROUP_HEADERS, live_rows)
    for title, headers, rows in (
        (STACKS_TITLE, STACK_HEADERS, stack_rows(device.peak.stacks)),
        (GROWTH_TITLE, GROWTH_HEADERS, growth_rows(device.growth)),
    ):
        if rows:
            lines += ["", f"{title}:", ""]
            lines += md_table(headers, [(*row[:-1], " ← ".join(row[-1])) for row in rows])
    lines += ["", f"Bytes in use over time: `{sparkline(device.timeline.in_use_max)}`"]
    return lines


def _tpu(target: TpuTarget) -> list[str]:
    lines = ["", f"## {_cell(tpu_title(target))}", ""]
    verdict = tpu_verdict(target)
    if verdict is not None:
        lines += [f"**{_cell(verdict)}**", ""]
    lines += md_table(TPU_HEADERS, tpu_program_rows(target))
    kinds = chip_kind_rows(target)
    if kinds is not None:
        lines += ["", f"{_cell(kinds[0])}:", "", *md_table(KIND_HEADERS, kinds[1])]
    tpu_peak = tpu_peak_rows(target)
    if tpu_peak is not None:
        lines += ["", f"{_cell(tpu_peak[0])}:", "", *md_table(BUFFER_HEADERS, tpu_peak[1])]
    # A note's own lines (XLA's message) each quoted: one block a note.
    notes = ["\n".join(f"> {_cell(line)}" for line in n.splitlines()) for n in tpu_notes(target)]
    return [*lines, "", *notes]


def _fit(fit: FitAdvice) -> list[str]:
    lines = ["", f"## {_cell(fit_title(fit.device))}", ""]
    lines += md_table(*fit_table(fit))
    return lines + [""] + [f"> {_cell(fit_note(note))}" for note in fit.notes]


def _programs(compiled: tuple[CompiledProgram, ...], limit: int | None = TOP_BUFFERS) -> list[str]:
    lines = ["", f"## {_cell(programs_title(compiled))}", ""]
    lines += md_table(PROGRAM_HEADERS, program_rows(compiled))
    top = next((p for p in compiled if p.heap is not None), None)
    if top is not None and top.heap is not None:
        lines += ["", f"{_cell(peak_title(top))}:", ""]
        lines += md_table(BUFFER_HEADERS, buffer_rows(top.heap, limit))
        lines += ["", f"Heap over program order: `{sparkline(heap_points(top.heap))}`"]
    return lines


def render_program_markdown(
    program: CompiledProgram,
    *,
    width: int = 100,
    color: bool = False,
    analysis: TraceAnalysis | None = None,
) -> str:
    """One program in full: `tpumem report --program NAME`."""
    title = f"# tpumem report: program {_cell(program.name)}\n\n"
    return title + "\n".join(_programs((program,), limit=None)).lstrip() + "\n"


# How markdown shows each kind of section (report/sections.py orders them).
_SECTIONS: dict[str, Callable[[Any], list[str]]] = {
    sections.ANSWER: _answer,
    sections.HEADLINE: lambda rows: md_table(("", ""), rows),
    sections.RUN: lambda rows: md_table(("", ""), rows),
    sections.FAILURE: _failure,
    sections.WARNINGS: lambda warnings: [""] + [f"> warning: {_cell(w)}" for w in warnings],
    sections.NO_EVENTS: lambda text: ["", text],
    sections.LEFT_OUT: lambda note: ["", note],
    sections.DEVICE: _device,
    sections.OTHER_DEVICES: lambda brief: [
        "",
        "## Other devices, largest peak first",
        "",
        *md_table(BRIEF_HEADERS, brief),
    ],
    sections.PROGRAMS: _programs,
    sections.TPU: _tpu,
    sections.CHANGES: _changes,
    sections.FIT: _fit,
}
