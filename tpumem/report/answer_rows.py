"""The answer, in words: what a report opens with. The peak of the device that
peaked highest, the lines that hold it (a compiled program's temporaries at the
lines inside it), and, in the sections that follow in every format, the rest."""

from __future__ import annotations

from dataclasses import dataclass

from tpumem.analysis.by_line import NO_PLAN, NO_TEMPORARIES, LineBytes, PeakLines
from tpumem.analysis.compiled.tpu import PlansApart
from tpumem.analysis.peak import highest
from tpumem.analysis.trace_figures import DeviceAnalysis, TraceAnalysis
from tpumem.report.change_rows import CHANGES_TITLE, change_lines
from tpumem.report.kind_words import KIND_HEADERS, kinds_rows
from tpumem.report.rows import step_words
from tpumem.report.shorten import op_tail
from tpumem.report.tpu_tables import tpu_verdict
from tpumem.trace.framework_words import FrameworkWords
from tpumem.units import counted, format_bytes, format_seconds

TOP_LINES = 8
KINDS_TITLE = "What the peak is"
LINE_HEADERS = ("bytes", "line", "what")
LINES_TITLE = "Lines holding the peak, largest first"
NO_LINE = "(no line recorded)"


def headline(device: DeviceAnalysis) -> str:
    """The peak in one line: how much, where, when, while what ran."""
    peak = device.peak
    when = format_seconds(peak.time_ns) + step_words(peak)
    text = f"Peak {format_bytes(peak.bytes)} on {device.device} at {when} ({device.peak_label})"
    running = [r.program.shown_name for r in device.programs_at_peak]
    if running:
        text += ", while " + " and ".join(running[:2]) + " ran"
    return text


def kind_rows(device: DeviceAnalysis) -> list[tuple[str, str, str, str]]:
    """The peak's kinds, then what it would add on a TPU (not part of the peak)."""
    kinds = device.kinds
    if kinds is None or not kinds.kinds:
        return []
    rows = kinds_rows(kinds.kinds, device.peak.bytes)
    padding = device.padding
    if padding.extra_bytes and not padding.included:
        rows.append(
            (f"+{format_bytes(padding.extra_bytes)}", "", "padding on a TPU", padding.label)
        )
    return rows


def line_rows(lines: PeakLines | None, limit: int = TOP_LINES) -> list[tuple[str, str, str]]:
    """The largest lines, then what the rest hold together."""
    if lines is None or not any(line.line for line in lines.lines):
        return []  # (no_lines says why)
    why = {p.name: p.why for p in lines.programs}
    rows = [
        (format_bytes(line.bytes), _where(line), _what(line, why.get(line.program or "", "")))
        for line in lines.lines[:limit]
    ]
    rest = lines.lines[limit:]
    if rest:
        count = len(rest)
        rows.append((format_bytes(sum(x.bytes for x in rest)), f"{count:,} more lines", "-"))
    return rows


def no_lines(lines: PeakLines | None) -> str | None:
    """Why there is no table of lines, where there is none for a peak."""
    if lines is None or not lines.lines or any(line.line for line in lines.lines):
        return None
    return (
        "No source line for the bytes live at the peak: the capture recorded none "
        "(a profiler's allocator events carry an op's name, not a Python line)"
    )


def _where(line: LineBytes) -> str:
    return line.line or NO_LINE


def _what(line: LineBytes, why: str) -> str:
    ops = ", ".join(dict.fromkeys(op_tail(op) for op in line.ops))
    if line.program is None:
        arrays = counted(line.buffers, "array")
        if line.regions:
            arrays += f" ({', '.join(line.regions)})"
        return f"{arrays} made by {ops}" if ops else arrays
    if line.unplaced:
        return (
            f"{line.program}: its allocations beyond the buffers at its peak (XLA's packing, "
            "or buffers the framework allocated with them)"
        )
    if why == NO_PLAN:
        return f"{line.program}: its temporaries (the trace has no plan of the program)"
    if why == NO_TEMPORARIES:
        return f"{line.program}: its temporaries (its plan has none live at its peak)"
    if line.at_call:  # (the call's line: XLA's metadata names none of the user's inside)
        return f"{line.program} temporaries, no line of yours inside in its metadata: {ops}"
    return f"{line.program} temporaries: {ops}"


def lines_note(lines: PeakLines | None, words: FrameworkWords | None = None) -> str | None:
    """How the programs' temporaries were placed at lines, where any were."""
    if lines is None:
        return None
    opened = [p for p in lines.programs if p.opened]
    if not opened:
        return None
    names = ", ".join(p.name for p in opened[:3])
    scaled = [p.name for p in opened if p.scale < 1.0]
    where = (words and words.program_lines) or "at the lines XLA's metadata gives them"
    note = (
        f"Temporaries of {names}: the buffers live at the program's own peak in XLA's "
        f"buffer assignment (compile-time), {where}"
    )
    if scaled:
        note += (
            f"; {', '.join(scaled)}: scaled to the size the run recorded, which the "
            "framework gives to a precision"
        )
    return note


@dataclass(frozen=True, slots=True)
class AnswerTable:
    title: str
    headers: tuple[str, ...]
    rows: list[tuple[str, ...]]
    bytes: list[int]  # each row's bytes, to sort by (0 for a row of none: padding, the rest)


@dataclass(frozen=True, slots=True)
class Answer:
    """What every format opens with, worded once: the headline, the kinds and the
    lines, the notes on how they were told, what to change."""

    headline: str
    verdicts: tuple[str, ...]  # on each TPU slice asked about (--tpu): fits or not
    tables: tuple[AnswerTable, ...]
    notes: tuple[str, ...]
    changes_title: str
    changes: list[tuple[str, str, str]]  # (figure, sentence, how it was obtained)


def plans_apart_words(apart: PlansApart) -> str:
    return (
        f"{apart.program}: XLA:TPU plans {format_bytes(apart.tpu_bytes)} of temporaries on "
        f"{apart.topology} where this run held {format_bytes(apart.run_bytes)}: the "
        "activations above are this backend's; "
        f"on {apart.topology} the step needs what the TPU table says"
    )


def answer(analysis: TraceAnalysis, top_lines: int | None = None) -> Answer | None:
    """`top_lines`: the largest lines shown (TOP_LINES), the rest in one row."""
    if not analysis.devices:
        return None
    device = highest(analysis.devices)  # the device whose peak the answer is about
    kinds = device.kinds.kinds if device.kinds is not None else ()
    lines = device.lines.lines if device.lines is not None else ()
    tables = []
    candidates: tuple[tuple[str, tuple[str, ...], list[tuple[str, ...]], list[int]], ...] = (
        (KINDS_TITLE, KIND_HEADERS, list(kind_rows(device)), [k.bytes for k in kinds]),
        (
            LINES_TITLE,
            LINE_HEADERS,
            list(line_rows(device.lines, top_lines or TOP_LINES)),
            [x.bytes for x in lines],
        ),
    )
    for title, headers, rows, sizes in candidates:
        if rows:
            tables.append(AnswerTable(title, headers, rows, (sizes + [0] * len(rows))[: len(rows)]))
    notes = (
        lines_note(device.lines, analysis.metadata.words),
        no_lines(device.lines),
        *map(plans_apart_words, analysis.plans_apart),
    )
    verdicts = [v for v in (tpu_verdict(target) for target in analysis.tpu) if v]
    return Answer(
        headline=headline(device),
        verdicts=tuple(verdicts),
        tables=tuple(tables),
        notes=tuple(note for note in notes if note),
        changes_title=CHANGES_TITLE,
        changes=change_lines(analysis.changes, analysis.metadata.words),
    )
