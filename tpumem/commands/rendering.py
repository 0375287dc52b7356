"""What more than one command renders: a distributed run's report (its traces
analysed first) and one compiled program's."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tpumem.errors import TpumemError
from tpumem.progress import progress

if TYPE_CHECKING:
    from tpumem.analysis.summary import RunAnalysis


def render_processes(
    traces: list[Path], where: str, fmt: str, width: int, color: bool, series_points: int = 0
) -> str:
    from tpumem.analysis.processes import SERIES_POINTS
    from tpumem.reading.many_traces import analyze_processes
    from tpumem.report.run_report import RENDERERS

    with progress(f"analysing {len(traces):,} traces of {where}") as tell:
        run = analyze_processes(
            traces,
            done=lambda finished, total: tell(f"analysed {finished:,} of {total:,} traces"),
            busiest_points=series_points or SERIES_POINTS,
        )
    return RENDERERS[fmt](run, where, width=width, color=color)


def render_program(analysis: RunAnalysis, name: str, fmt: str, *, width: int, color: bool) -> str:
    """`--program NAME`: that program in full, in the format asked for."""
    from tpumem.analysis.programs import find_program

    found = find_program(analysis.compiled, name)
    if found is None:
        known = ", ".join(p.name for p in analysis.compiled[:8]) or "none recorded"
        raise TpumemError(f"no compiled program named {name!r} in the trace (largest: {known})")
    if fmt == "json":
        from tpumem.report.json_report import PROGRAM_SCHEMA, dump, program_json

        return dump({"schema": PROGRAM_SCHEMA, **program_json(found)}, indent=2) + "\n"
    if fmt == "md":
        from tpumem.report.markdown import render_program_markdown

        return render_program_markdown(found)
    if fmt == "html":
        from tpumem.report.html import render_html

        return render_html(analysis, program=found.name)
    from tpumem.report.text import render_program_text

    return render_program_text(found, width=width, color=color)
