"""`tpumem diff`: what changed between two runs of one program."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from tpumem.commands.options import parse_size
from tpumem.errors import TpumemError
from tpumem.outputs import emit
from tpumem.progress import progress
from tpumem.reading.paths import traces_of

RENDERERS = {
    "text": "render_diff_text",
    "json": "render_diff_json",
    "md": "render_diff_markdown",
}


def run_diff(
    before: Path,
    after: Path,
    fmt: str | None,
    output: Path | None,
    width: int,
    force: bool,
    noise: str = "64KiB",
) -> None:
    from tpumem.analysis.difference import diff_runs
    from tpumem.analysis.summary import analyze_with_events
    from tpumem.report import HTML_SERIES_POINTS, reporter_for
    from tpumem.trace.reader import load

    name = reporter_for(output, fmt).name
    noise_bytes = parse_size("--noise", noise)
    if name not in (*RENDERERS, "html"):
        raise TpumemError(f"unknown diff format {name!r} (choose from text, json, md, html)")
    points = HTML_SERIES_POINTS if name == "html" else 0
    processes: tuple = ()
    inputs = [before, after]
    if before.is_dir() or after.is_dir():
        before, after, processes = _busiest_pair(before, after)
    runs = []
    for path in (before, after):
        trace = load(path)
        with progress(f"analysing {path}"):
            analysis, figures = analyze_with_events(trace, series_points=points)
        runs.append((trace, analysis, figures))
    diff = replace(diff_runs(runs[0], runs[1], noise_bytes), processes=processes)
    if name == "html":
        from tpumem.report.html import render_diff_html

        text = render_diff_html(diff)
    else:
        from tpumem.report import diff_report

        color = output is None and sys.stdout.isatty()
        text = getattr(diff_report, RENDERERS[name])(diff, width=width, color=color)
    emit(text, output, inputs, force)


def _busiest_pair(before: Path, after: Path) -> tuple[Path, Path, tuple]:
    """Two distributed runs: each process's peak, side by side, and the traces of
    the pair AFTER's busiest process makes, for the diff in full."""
    from tpumem.analysis.processes import busiest_pair, pair_processes, peak_pairs
    from tpumem.reading.many_traces import summaries_of

    if not (before.is_dir() and after.is_dir()):
        raise TpumemError("diff two runs' directories, or two traces: not one of each")
    runs = []
    for path in (before, after):
        traces, _, _ = traces_of([path])
        with progress(f"analysing {len(traces):,} traces of {path}"):
            runs.append(summaries_of(traces))
    pairs = pair_processes(*runs)
    first, second = busiest_pair(pairs)
    if first is None or second is None:
        raise TpumemError(f"no process of {after} has a counterpart in {before}")
    return Path(first.path), Path(second.path), peak_pairs(pairs)
