"""`tpumem compare`: runs side by side (scripts are profiled first)."""

from __future__ import annotations

import sys
from pathlib import Path

from tpumem.commands.common import emit, progress
from tpumem.errors import TpumemError

FORMATS = ("text", "json")


def run_compare(
    runs: list[str], html: Path | None, fmt: str, output_dir: Path, width: int, force: bool
) -> None:
    if fmt not in FORMATS:
        raise TpumemError(f"unknown compare format {fmt!r} (choose from {', '.join(FORMATS)})")
    if len(runs) < 2:
        raise TpumemError("compare needs at least two runs")
    from tpumem.analysis import analyze
    from tpumem.analysis.comparison import compare
    from tpumem.compare_runs import profile_scripts, resolve
    from tpumem.report import HTML_SERIES_POINTS
    from tpumem.trace.reader import load

    sources = resolve(runs, output_dir)
    profile_scripts(sources)
    points = HTML_SERIES_POINTS if html else 0  # only the page draws series
    analyses = []
    for source in sources:
        with progress(f"analysing {source.trace}"):
            analyses.append(analyze(load(source.trace), series_points=points))
    comparison = compare(analyses)
    if fmt == "json":
        from tpumem.report.compare_json import render_compare_json

        sys.stdout.write(render_compare_json(comparison))
    else:
        from tpumem.report.compare_text import render_compare_text

        sys.stdout.write(render_compare_text(comparison, width=width, color=sys.stdout.isatty()))
    if html is not None:
        from tpumem.report.html import render_compare_html

        emit(render_compare_html(comparison), html, [s.trace for s in sources], force)
