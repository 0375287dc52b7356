"""`tpumem report`: every figure of a trace, in the format asked for."""

from __future__ import annotations

import sys

from tpumem.commands.options import text_width
from tpumem.commands.requests import ReportRequest
from tpumem.commands.tpu_compiles import compile_for_tpus
from tpumem.errors import TpumemError
from tpumem.outputs import emit
from tpumem.progress import progress
from tpumem.reading.paths import opened_run

# What a report imports besides what reads a profile (and its format's renderer).
_ANALYSIS = ("tpumem.analysis", "tpumem.trace.reader")


def run_report(request: ReportRequest) -> None:
    from tpumem.report import PROCESSES, PROGRAM, reporter, reporter_for

    page = request.page
    chosen = reporter_for(page.output, page.fmt)
    color = page.output is None and sys.stdout.isatty()
    paths = list(request.paths)
    width = text_width(page.width, None if page.output else sys.stdout)  # (a file: none)
    with opened_run(paths, (*_ANALYSIS, chosen.module)) as given:
        if given.is_processes:
            for option, value in (
                ("--capacity", request.capacity),
                ("--program", request.program),
                ("--tpu", request.tpu),
            ):
                if value:
                    raise TpumemError(f"{option} reports on one trace: give one of the run's")
            from tpumem.commands.analysed_runs import analysed_processes

            run = analysed_processes(
                given.traces,
                given.where,
                chosen.series_points,
                expect_summaries=not given.imported,  # (none in a scratch directory)
                stored=given.stored,
            )
            text = reporter(PROCESSES, chosen.name).render(
                run,
                width=width,
                color=color,
                full=page.whole,
                where=given.where,
            )
            emit(text, page.output, [*paths, *given.traces], page.force)
            return
        from tpumem.reading.analyses import analysed

        trace = given.traces[0]
        compile_for_tpus([trace], request.tpu, quiet=page.output is not None)
        with progress(f"analysing {given.where}"):
            analysis = analysed(
                trace,
                given.shown_as,
                series_points=chosen.series_points,
                capacity=request.capacity,
            )
    if request.program is None:
        text = chosen.render(analysis, width=width, color=color, full=page.whole)
    else:
        from tpumem.commands.analysed_runs import program_named

        found = program_named(analysis, request.program)
        text = reporter(PROGRAM, chosen.name).render(
            found,
            width=width,
            color=color,
            analysis=analysis,
        )
    emit(text, page.output, [*paths, *given.traces], page.force)
