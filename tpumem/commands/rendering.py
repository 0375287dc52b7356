"""What more than one command reads before it renders: a distributed run's
processes, analysed; one compiled program, found by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tpumem.errors import TpumemError
from tpumem.progress import progress

if TYPE_CHECKING:
    from tpumem.analysis.processes import ProcessRun
    from tpumem.analysis.programs import CompiledProgram
    from tpumem.analysis.run_figures import RunAnalysis
    from tpumem.reading.many_traces import PerProcess, PerSummary


def analysed_processes(
    traces: list[Path],
    where: str,
    series_points: int = 0,
    capacity: int | None = None,
    per_process: PerProcess | None = None,
    per_summary: PerSummary | None = None,
    expect_summaries: bool = True,
    fetch: Callable[[Path], None] | None = None,
) -> ProcessRun:
    """A distributed run's traces analysed (analyze_processes), with a spinner that
    counts them."""
    from tpumem.analysis.processes import SERIES_POINTS
    from tpumem.reading.many_traces import analyze_processes

    with progress(f"analysing {len(traces):,} traces of {where}") as tell:
        return analyze_processes(
            traces,
            done=lambda finished, total: tell(f"analysed {finished:,} of {total:,} traces"),
            busiest_points=series_points or SERIES_POINTS,
            capacity=capacity,
            per_process=per_process,
            per_summary=per_summary,
            expect_summaries=expect_summaries,
            fetch=fetch,
        )


def program_named(analysis: RunAnalysis, name: str) -> CompiledProgram:
    """`--program NAME`: the compiled program of that name (or part of it)."""
    from tpumem.analysis.programs import find_program

    found = find_program(analysis.compiled, name)
    if found is None:
        known = ", ".join(p.name for p in analysis.compiled[:8]) or "none recorded"
        raise TpumemError(f"no compiled program named {name!r} in the trace (largest: {known})")
    return found
