"""The answer, in words: what a report opens with. The peak of the device that
peaked highest, the lines that hold it (a compiled program's temporaries at the
lines inside it), and, in the sections that follow in every format, the rest."""

from __future__ import annotations

from tpumem.analysis.by_line import LineBytes, PeakLines
from tpumem.analysis.run_figures import DeviceAnalysis, RunAnalysis
from tpumem.report.shorten import op_tail
from tpumem.units import format_bytes, format_seconds

TOP_LINES = 8
KIND_HEADERS = ("bytes", "share", "kind", "how it is known")
KINDS_TITLE = "What the peak is"
LINE_HEADERS = ("bytes", "line", "what")
LINES_TITLE = "Lines holding the peak, largest first"
NO_LINE = "(no line recorded)"
NO_PROGRAM_LINE = "(no line in XLA's metadata)"


def answer_device(analysis: RunAnalysis) -> DeviceAnalysis | None:
    """The device whose peak the answer is about: the highest (the first on a tie)."""
    if not analysis.devices:
        return None
    return max(analysis.devices, key=lambda d: d.peak.bytes)


def headline(device: DeviceAnalysis) -> str:
    """The peak in one line: how much, where, when, while what ran."""
    peak = device.peak
    when = format_seconds(peak.time_ns) + ("" if peak.step is None else f", step {peak.step}")
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
    peak = device.peak.bytes or 1
    rows = [
        (format_bytes(k.bytes), _share(k.bytes / peak), k.kind, "; ".join(k.how))
        for k in kinds.kinds
    ]
    padding = device.padding
    if padding.extra_bytes and not padding.included:
        rows.append(
            (f"+{format_bytes(padding.extra_bytes)}", "", "padding on a TPU", padding.label)
        )
    return rows


def _share(share: float) -> str:
    return "<1%" if 0 < share < 0.005 else f"{share:.0%}"


def line_rows(lines: PeakLines | None, limit: int = TOP_LINES) -> list[tuple[str, str, str]]:
    """The largest lines, then what the rest hold together."""
    if lines is None or not any(line.line for line in lines.lines):
        return []  # the capture recorded no lines (a profiler's allocator events)
    rows = [(format_bytes(line.bytes), _where(line), _what(line)) for line in lines.lines[:limit]]
    rest = lines.lines[limit:]
    if rest:
        count = len(rest)
        rows.append((format_bytes(sum(x.bytes for x in rest)), f"{count:,} more lines", "-"))
    return rows


def _where(line: LineBytes) -> str:
    if line.line:
        return line.line
    return NO_PROGRAM_LINE if line.program and not line.unplaced else NO_LINE


def _what(line: LineBytes) -> str:
    ops = ", ".join(dict.fromkeys(op_tail(op) for op in line.ops))
    if line.program is None:
        arrays = f"{line.buffers:,} array" + ("" if line.buffers == 1 else "s")
        if line.regions:
            arrays += f" ({', '.join(line.regions)})"
        return f"{arrays} made by {ops}" if ops else arrays
    if line.unplaced:
        return f"{line.program}: its temporary allocation beyond the buffers at its peak"
    if not ops:  # the program's temporaries, no plan to open them by
        return f"{line.program}: its temporaries (XLA's plan of them was not recorded)"
    if line.at_call:  # (the call's line: XLA's metadata names none inside)
        return f"{line.program} temporaries, no line inside in XLA's metadata: {ops}"
    return f"{line.program} temporaries: {ops}"


def lines_note(lines: PeakLines | None) -> str | None:
    """How the programs' temporaries were placed at lines, where any were."""
    if lines is None:
        return None
    opened = [p for p in lines.programs if p.opened]
    if not opened:
        return None
    names = ", ".join(p.name for p in opened[:3])
    scaled = [p.name for p in opened if p.scale < 1.0]
    note = (
        f"Temporaries of {names}: the buffers live at the program's own peak in XLA's "
        "buffer assignment, at the lines XLA's metadata gives them (compile-time)"
    )
    if scaled:
        note += (
            f"; {', '.join(scaled)}: scaled to the size the run recorded, which the "
            "framework gives to a precision"
        )
    return note
