"""A trace read and analysed: the one place the commands do both."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpumem.analysis.trace_figures import DeviceEventFigures, TraceAnalysis
    from tpumem.trace.model import Trace


def analysed(
    path: Path | str,
    shown_as: str | None = None,
    *,
    series_points: int = 0,
    capacity: int | None = None,
    page: bool = True,
) -> TraceAnalysis:
    """Every figure of the trace at `path` (`shown_as`: the name a report gives it,
    where it is not the file's: a profile imported on the way); `series_points`,
    `capacity` and `page` as analyze takes them."""
    return analysed_with_events(
        path, shown_as, series_points=series_points, capacity=capacity, page=page
    )[1]


def analysed_with_events(
    path: Path | str,
    shown_as: str | None = None,
    *,
    series_points: int = 0,
    capacity: int | None = None,
    page: bool = True,
) -> tuple[Trace, TraceAnalysis, list[DeviceEventFigures]]:
    """The trace, its figures and the per-event series they came from (what an
    export writes and a diff matches)."""
    from tpumem.analysis.trace_figures import analyze_with_events
    from tpumem.trace.reader import load

    trace = load(path, shown_as)
    analysis, figures = analyze_with_events(
        trace, series_points=series_points, capacity=capacity, page=page
    )
    return trace, analysis, figures


def analysed_one(
    path: Path | str, *, series_points: int = 0, capacity: int | None = None, role: str = ""
) -> TraceAnalysis:
    """The one trace at `path` analysed, as every command reads a path: a trace,
    or a profile imported on the way; a distributed run is one line (`role`: what
    the path stands for, as the line names it: "--baseline")."""
    from tpumem.errors import TpumemError
    from tpumem.reading.paths import opened_run

    with opened_run([Path(path)]) as given:
        if given.is_processes:
            said = f"{role}: " if role else ""
            raise TpumemError(
                f"{said}{path} holds {len(given.traces):,} traces (a distributed run): "
                "give one process's"
            )
        return analysed(
            given.traces[0], given.shown_as, series_points=series_points, capacity=capacity
        )
