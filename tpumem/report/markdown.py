"""The markdown report: the same rows as the terminal, as tables."""

from __future__ import annotations

from tpumem.analysis.summary import RunAnalysis
from tpumem.report.rows import device_rows, fit_rows, group_rows, run_rows, sparkline
from tpumem.report.text import GROUP_HEADERS


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def render_markdown(analysis: RunAnalysis) -> str:
    lines = [f"# tpumem report: {analysis.path or ''}", ""]
    lines += _table(("", ""), run_rows(analysis))
    lines += [""] + [f"> warning: {w}" for w in analysis.warnings]
    for device in analysis.devices:
        lines += ["", f"## {device.device} (fidelity: {device.fidelity})", ""]
        lines += _table(("figure", "value", "how"), device_rows(device))
        groups = group_rows(device.peak.groups)
        if groups:
            lines += ["", "Live at peak, largest first:", ""]
            lines += _table(GROUP_HEADERS, groups)
        lines += ["", f"Bytes in use over time: `{sparkline(device.timeline.in_use_max)}`"]
    if analysis.fit is not None:
        lines += ["", f"## Would it fit? ({analysis.fit.device})", ""]
        lines += _table(("accelerator", "answer", "smallest setting"), fit_rows(analysis.fit))
        lines += [""] + [f"> {note}" for note in analysis.fit.notes]
    return "\n".join(lines) + "\n"
