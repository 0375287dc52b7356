"""`tpumem diff`: what changed between two runs of one program."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from tpumem.commands.options import text_width
from tpumem.commands.requests import DiffRequest
from tpumem.errors import TpumemError
from tpumem.outputs import emit
from tpumem.progress import progress
from tpumem.reading.paths import RunInput, opened_runs
from tpumem.units import counted


def run_diff(request: DiffRequest) -> None:
    from tpumem.analysis.difference import diff_runs
    from tpumem.reading.analyses import analysed_with_events
    from tpumem.report import DIFF, reporter_for

    page = request.page
    chosen = reporter_for(page.output, page.fmt, DIFF)
    processes: tuple = ()
    inputs = [request.before, request.after]
    with opened_runs(inputs) as (before, after):
        if before.is_processes or after.is_processes:
            pair = _busiest_pair(before, after)
            traces, processes = [pair[0], pair[1]], pair[2]
            shown = [before.name_of(pair[0]), after.name_of(pair[1])]
        else:
            traces = [before.traces[0], after.traces[0]]
            shown = [before.shown_as, after.shown_as]
        runs = []
        for trace, shown_as in zip(traces, shown, strict=True):
            with progress(f"analysing {shown_as or trace}"):
                runs.append(
                    analysed_with_events(trace, shown_as, series_points=chosen.series_points)
                )
    diff = replace(diff_runs(runs[0], runs[1], request.noise_bytes), processes=processes)
    color = page.output is None and sys.stdout.isatty()
    text = chosen.render(
        diff, width=text_width(page.width, None if page.output else sys.stdout), color=color
    )
    emit(text, page.output, inputs, page.force)


def _busiest_pair(before: RunInput, after: RunInput) -> tuple[Path, Path, tuple]:
    """Two distributed runs: each process's peak, side by side, and the traces of
    the pair AFTER's busiest process makes, for the diff in full."""
    from tpumem.analysis.processes import busiest_pair, pair_processes, peak_pairs
    from tpumem.reading.many_traces import summaries_of

    if not (before.is_processes and after.is_processes):
        raise TpumemError("diff two runs' directories, or two traces: not one of each")
    runs = []
    for given in (before, after):
        with progress(f"analysing {counted(len(given.traces), 'trace')} of {given.where}"):
            runs.append(summaries_of(given.traces, given.stored))
    pairs = pair_processes(*runs)
    first, second = busiest_pair(pairs)
    if first is None or second is None:
        raise TpumemError(f"no process of {after.where} has a counterpart in {before.where}")
    for given, process in ((before, first), (after, second)):
        if given.stored is not None:  # (in object storage: the pair, read in full, brought)
            given.stored.fetch(Path(process.path))
    return Path(first.path), Path(second.path), peak_pairs(pairs)
