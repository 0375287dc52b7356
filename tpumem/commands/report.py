"""`tpumem report`: every figure of a trace, in the format asked for."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tpumem.commands.options import parse_capacity, parse_topologies
from tpumem.commands.rendering import render_processes, render_program
from tpumem.commands.tpu_compiles import compile_for_tpus
from tpumem.errors import TpumemError
from tpumem.outputs import emit
from tpumem.progress import progress
from tpumem.reading.paths import opened_traces

if TYPE_CHECKING:
    pass


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
