"""`tpumem report`: every figure of a trace, in the format asked for."""

from __future__ import annotations

import sys
from pathlib import Path

from tpumem.commands.common import emit, parse_capacity, progress


def run_report(
    trace: Path,
    fmt: str | None,
    output: Path | None,
    width: int,
    force: bool,
    capacity: str | None = None,
) -> None:
    from tpumem.analysis import analyze
    from tpumem.report import reporter_for
    from tpumem.trace.reader import load

    reporter = reporter_for(output, fmt)
    size = parse_capacity(capacity)
    with progress(f"analysing {trace}"):
        analysis = analyze(load(trace), series_points=reporter.series_points, capacity=size)
    color = output is None and sys.stdout.isatty()
    emit(reporter.render(analysis, width=width, color=color), output, [trace], force)
