"""`tpumem report`: every figure of a trace, in the format asked for."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tpumem.commands.common import (
    compile_for_tpus,
    emit,
    opened_traces,
    parse_capacity,
    parse_topologies,
    progress,
)
from tpumem.errors import TpumemError

if TYPE_CHECKING:
    from tpumem.analysis.summary import RunAnalysis


def run_report(
    paths: list[Path],
    fmt: str | None,
    output: Path | None,
    width: int,
    force: bool,
    capacity: str | None = None,
    program: str | None = None,
    tpu: list[str] | None = None,
) -> None:
    from tpumem.report import reporter_for

    reporter = reporter_for(output, fmt)
    with opened_traces(paths, (*_ANALYSIS, reporter.module)) as (traces, where, is_run, shown_as):
        from tpumem.analysis import analyze
        from tpumem.trace.reader import load

        if is_run:
            for option, given in (("--capacity", capacity), ("--program", program), ("--tpu", tpu)):
                if given:
                    raise TpumemError(f"{option} reports on one trace: give one of the run's")
            text = render_processes(
                traces, where, reporter.name, width, _color(output), reporter.series_points
            )
            emit(text, output, [*paths, *traces], force)
            return
        trace = traces[0]
        size = parse_capacity(capacity)
        compile_for_tpus([trace], parse_topologies(tpu), quiet=output is not None)
        with progress(f"analysing {where}"):
            loaded = load(trace, shown_as)
            analysis = analyze(loaded, series_points=reporter.series_points, capacity=size)
    color = _color(output)
    if program is None:
        text = reporter.render(analysis, width=width, color=color)
    else:
        text = render_program(analysis, program, reporter.name, width=width, color=color)
    emit(text, output, [*paths, *traces], force)


# What a report imports besides what reads a profile (and its format's renderer).
_ANALYSIS = ("tpumem.analysis", "tpumem.trace.reader")


def _color(output: Path | None) -> bool:
    return output is None and sys.stdout.isatty()


def render_processes(
    traces: list[Path], where: str, fmt: str, width: int, color: bool, series_points: int = 0
) -> str:
    from tpumem.analysis.processes import SERIES_POINTS, analyze_processes
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
