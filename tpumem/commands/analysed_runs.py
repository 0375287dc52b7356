"""What more than one command reads before it renders: a distributed run's
processes, analysed; one compiled program, found by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tpumem.errors import TpumemError
from tpumem.progress import progress
from tpumem.units import counted

if TYPE_CHECKING:
    from tpumem.analysis.compiled.programs import CompiledProgram
    from tpumem.analysis.processes import ProcessRun
    from tpumem.analysis.trace_figures import TraceAnalysis
    from tpumem.reading.many_traces import PerProcess, PerSummary
    from tpumem.reading.object_storage import Fetched


def analysed_processes(
    traces: list[Path],
    where: str,
    series_points: int = 0,
    capacity: int | None = None,
    per_process: PerProcess | None = None,
    per_summary: PerSummary | None = None,
    expect_summaries: bool = True,
    stored: Fetched | None = None,
) -> ProcessRun:
    """A distributed run's traces analysed (analyze_processes), with a spinner that
    counts them; `stored`: the run's traces in object storage (each then goes by
    its URL, not by its scratch copy's name)."""
    from tpumem.analysis.processes import SERIES_POINTS
    from tpumem.reading.many_traces import analyze_processes

    with progress(f"analysing {counted(len(traces), 'trace')} of {where}") as tell:
        run = analyze_processes(
            traces,
            done=lambda finished, total: tell(
                f"analysed {finished:,} of {counted(total, 'trace')}"
            ),
            busiest_points=series_points or SERIES_POINTS,
            capacity=capacity,
            per_process=per_process,
            per_summary=per_summary,
            expect_summaries=expect_summaries,
            stored=stored,
        )
    return run if stored is None else _renamed(run, stored.url_of, stored.left_out)


def _renamed(
    run: ProcessRun,
    names: Callable[[Path], str | None],
    left_out: list[tuple[str, str]],
) -> ProcessRun:
    """The run with each trace called what it goes by, and those there that could
    not be brought here among the ones left out."""
    from dataclasses import replace

    def name(path: str | None) -> str | None:
        return None if path is None else (names(Path(path)) or path)

    return replace(
        run,
        processes=tuple(replace(p, path=name(p.path) or p.path) for p in run.processes),
        busiest=replace(run.busiest, path=name(run.busiest.path)),
        unreadable=(
            *((name(path) or path, why) for path, why in run.unreadable),
            *left_out,
        ),
        summarised_here=tuple((name(path) or path, why) for path, why in run.summarised_here),
    )


def program_named(analysis: TraceAnalysis, name: str) -> CompiledProgram:
    """`--program NAME`: the compiled program of that name (or part of it)."""
    from tpumem.analysis.compiled.programs import find_program

    found = find_program(analysis.compiled, name)
    if found is None:
        known = ", ".join(p.name for p in analysis.compiled[:8]) or "none recorded"
        raise TpumemError(f"no compiled program named {name!r} in the trace (largest: {known})")
    return found
