"""Many traces of one run, analysed one at a time: in worker processes when the
run is large (one trace at a time in each: a run of 64 hosts is never held in
memory at once), else in this process. Each is reduced to its summary; the
busiest is analysed in full (tpumem/analysis/processes.py makes the run of them)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tpumem.analysis.processes import (
    SERIES_POINTS,
    ProcessRun,
    ProcessSummary,
    busiest,
    busiest_peak,
    process_order,
    process_run,
    summarize,
)
from tpumem.analysis.trace_figures import TraceAnalysis
from tpumem.errors import TpumemError
from tpumem.reading.analyses import analysed
from tpumem.reading.summary_files import MISSING, read_summary

if TYPE_CHECKING:
    from tpumem.reading.object_storage import Fetched

# Below this many bytes of traces in all, worker processes cost more than they save.
_PARALLEL_FROM_BYTES = 64 * 1024 * 1024


# What a caller asks of each process's full analysis, where it is made (a worker):
# a module-level function (or a partial of one), so that it can be sent there.
PerProcess = Callable[[TraceAnalysis], tuple[str, ...]]
# What a caller asks of each process's summary: answered from the summary its
# recording left, where the traces need not be read.
PerSummary = Callable[[ProcessSummary], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class _Task:
    points: int = SERIES_POINTS
    capacity: int | None = None
    per_process: PerProcess | None = None
    per_summary: PerSummary | None = None

    @property
    def from_summaries(self) -> bool:
        """Whether the recordings' summaries answer what is asked: not a capacity
        (the allocator model replays the trace) nor what needs the full analysis."""
        return self.capacity is None and self.per_process is None

    def analyse(self, path: str, points: int | None = None, page: bool = True) -> TraceAnalysis:
        """`page`: what the busiest process's page explores too (its series' finer
        levels, moments); a summary's line needs only the points."""
        return analysed(
            path, series_points=points or self.points, capacity=self.capacity, page=page
        )

    def summarize(self, analysis: TraceAnalysis) -> ProcessSummary:
        return self.found(summarize(analysis), analysis)

    def found(
        self, summary: ProcessSummary, analysis: TraceAnalysis | None = None
    ) -> ProcessSummary:
        """The summary with what the caller asks of it (of its analysis, where made)."""
        findings: tuple[str, ...] = ()
        if self.per_summary is not None:
            findings += self.per_summary(summary)
        if self.per_process is not None and analysis is not None:
            findings += self.per_process(analysis)
        return replace(summary, findings=findings)

    def __call__(self, path: str) -> ProcessSummary | str:
        """In a worker: one trace in, its summary out (the trace and its analysis
        stay there); why it could not be read, for a trace that cannot."""
        try:
            return self.summarize(self.analyse(path, page=False))
        except TpumemError as error:
            return str(error)


def workers_for(paths: Sequence[Path]) -> int:
    """How many worker processes analyse the traces: one per core, none for a small run."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    total = sum(p.stat().st_size for p in paths if p.exists())
    if len(paths) < 2 or total < _PARALLEL_FROM_BYTES:
        return 0
    return max(1, min(cores or 1, len(paths)))


def analyze_processes(
    paths: Sequence[Path],
    workers: int | None = None,
    done: Callable[[int, int], None] | None = None,
    busiest_points: int = SERIES_POINTS,
    capacity: int | None = None,
    per_process: PerProcess | None = None,
    per_summary: PerSummary | None = None,
    expect_summaries: bool = True,
    stored: Fetched | None = None,
) -> ProcessRun:
    """The run the traces make together: from the summaries their recordings left
    where those answer (summary_files.py), the rest analysed. `workers`: worker
    processes for those (0: this one, None: workers_for); `done(finished, total)`
    is told as each trace is summarised; `busiest_points`: drawing points of the
    busiest process' full analysis; `capacity`: asked of each process (analyze's);
    `per_process`: findings of each process's full analysis, and `per_summary` of
    its summary, kept in its summary; `expect_summaries`: False where none is made
    yet (a run followed or imported here), so that a missing one goes unsaid;
    `stored`: the run's traces in object storage, each brought whole before it is
    read in full."""
    task = _Task(capacity=capacity, per_process=per_process, per_summary=per_summary)
    read = _read(paths, workers, done, task, stored)
    processes, unreadable = list(read.processes), list(read.unreadable)
    said = [(path, why) for path, why in read.summarised_here if expect_summaries or why != MISSING]
    kept = read.kept
    while True:
        most = busiest(processes)
        reuse = kept is not None and kept.path == most.path and busiest_points == SERIES_POINTS
        if not reuse and stored is not None:
            stored.fetch(Path(most.path))  # (what storage will not give ends the command)
        try:
            analysis = (
                kept if reuse and kept is not None else task.analyse(most.path, busiest_points)
            )
        except TpumemError as error:  # (its summary stood for a trace that cannot be read)
            processes.remove(most)
            unreadable.append((most.path, str(error)))
            said = [(path, why) for path, why in said if path != most.path]
            if not processes:
                raise
            continue
        if most.made_from != "summary":
            break
        # Read in full anyway, the busiest process's figures are its trace's; where
        # they are not its summary's, the run says so (and, its summary having
        # overstated its peak, the busiest may be another, read in full in turn).
        fresh = replace(task.summarize(analysis), path=most.path)
        if busiest_points != SERIES_POINTS:  # (its line drawn as every other's)
            fresh = replace(fresh, line=most.line)
        differ = _disagreement(most, fresh)
        if differ is None:
            break
        processes[processes.index(most)] = fresh
        said.append((most.path, differ))
        if busiest(processes).path == most.path:
            break
    return process_run(tuple(processes), tuple(unreadable), analysis, tuple(said))


def _disagreement(kept: ProcessSummary, fresh: ProcessSummary) -> str | None:
    """Where the summary that stood for a process differs from its trace's figures."""
    # (the line's points depend on how many the busiest is drawn with)
    same = replace(
        kept, path=fresh.path, made_from=fresh.made_from, findings=fresh.findings, line=fresh.line
    )
    if same == fresh:
        return None
    figures = ("peak_bytes", "pool_bytes", "peak_device", "steps", "complete")
    name = next((n for n in figures if getattr(fresh, n) != getattr(kept, n)), None)
    detail = (
        f" ({name.replace('_', ' ')} {getattr(kept, name)!r} in the summary, "
        f"{getattr(fresh, name)!r} in the trace)"
        if name is not None
        else ""
    )
    return f"its summary disagrees with its trace{detail}: the trace wins"


def _summaries(
    paths: Sequence[Path], workers: int, done: Callable[[int, int], None] | None, task: _Task
) -> tuple[list[ProcessSummary | str], TraceAnalysis | None]:
    """Each trace's summary (or why it could not be read), in the order given; in
    this process (workers == 0), the busiest analysis seen is kept, so that it is
    not analysed twice."""
    names = [str(p) for p in paths]
    tell = done or (lambda finished, total: None)
    if workers == 0:
        results: list[ProcessSummary | str] = []
        kept: TraceAnalysis | None = None
        for number, name in enumerate(names, 1):
            try:
                analysis = task.analyse(name)
            except TpumemError as error:
                results.append(str(error))
            else:
                summary = task.summarize(analysis)
                if kept is None or summary.peak_bytes > busiest_peak(kept):
                    kept = analysis
                results.append(summary)
            tell(number, len(names))
        return results, kept
    import multiprocessing

    # forkserver: a worker starts from a clean process, not a copy of this one
    # (whose spinner thread a fork would copy mid-stride).
    context = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        results = []
        for number, result in enumerate(pool.map(task, names), 1):
            results.append(result)
            tell(number, len(names))
    return results, None


@dataclass(frozen=True, slots=True)
class _Read:
    processes: tuple[ProcessSummary, ...]  # in the order of processes (rank, host, pid)
    unreadable: tuple[tuple[str, str], ...]  # (trace, why)
    kept: TraceAnalysis | None  # the busiest analysis, where one was made here
    summarised_here: tuple[tuple[str, str], ...]  # (trace, why its summary was not used)


def _read(
    paths: Sequence[Path],
    workers: int | None,
    done: Callable[[int, int], None] | None,
    task: _Task,
    stored: Fetched | None = None,
) -> _Read:
    """The traces' summaries: the ones their recordings left where they answer, the
    rest made from the traces; one line for a run none of whose traces can be read."""
    if not paths:
        raise TpumemError("no traces in this run")
    results: list[ProcessSummary | str | None] = [None] * len(paths)
    said: list[tuple[str, str]] = []
    if task.from_summaries:
        for number, path in enumerate(paths):
            kept_summary = read_summary(path, None if stored is None else stored.identity(path))
            if isinstance(kept_summary, ProcessSummary):
                results[number] = task.found(kept_summary)
            else:
                said.append((str(path), kept_summary))
    left = [number for number, result in enumerate(results) if result is None]
    if left:
        from_summaries = len(paths) - len(left)
        tell = None
        if done is not None:
            tell = lambda finished, total: done(from_summaries + finished, len(paths))  # noqa: E731
        rest = [paths[number] for number in left]
        if stored is not None:  # (read in full here: brought whole first)
            for path in rest:
                stored.fetch(path)
        chosen = workers_for(rest) if workers is None else workers
        made, kept = _summaries(rest, chosen, tell, task)
        for number, result in zip(left, made, strict=True):
            results[number] = result
    else:
        kept = None
        if done is not None:
            done(len(paths), len(paths))
    found = tuple(sorted((r for r in results if isinstance(r, ProcessSummary)), key=process_order))
    unreadable = tuple(
        (str(path), r) for path, r in zip(paths, results, strict=True) if isinstance(r, str)
    )
    if not found:
        why = unreadable[0][1]
        raise TpumemError(
            why
            if len(unreadable) == 1
            else f"none of the {len(paths)} traces could be read ({why})"
        )
    unread = {path for path, _ in unreadable}
    here = tuple((path, why) for path, why in said if path not in unread)
    return _Read(found, unreadable, kept, here)


def summaries_of(
    paths: Sequence[Path], stored: Fetched | None = None
) -> tuple[ProcessSummary, ...]:
    """Each readable trace's summary, in the order of processes (rank, host, pid):
    the one its recording left where it stands, else made from the trace (brought
    whole first, where it is in object storage)."""
    return _read(paths, None, None, _Task(), stored).processes
