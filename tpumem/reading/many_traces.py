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
from tpumem.analysis.run_figures import RunAnalysis
from tpumem.errors import TpumemError
from tpumem.reading.analyses import analysed

# Below this many bytes of traces in all, worker processes cost more than they save.
_PARALLEL_FROM_BYTES = 64 * 1024 * 1024


# What a caller asks of each process's full analysis, where it is made (a worker):
# a module-level function (or a partial of one), so that it can be sent there.
PerProcess = Callable[[RunAnalysis], tuple[str, ...]]


@dataclass(frozen=True, slots=True)
class _Task:
    points: int = SERIES_POINTS
    capacity: int | None = None
    per_process: PerProcess | None = None

    def analyse(self, path: str, points: int | None = None) -> RunAnalysis:
        return analysed(path, series_points=points or self.points, capacity=self.capacity)

    def summarize(self, analysis: RunAnalysis) -> ProcessSummary:
        summary = summarize(analysis)
        if self.per_process is None:
            return summary
        return replace(summary, findings=self.per_process(analysis))

    def __call__(self, path: str) -> ProcessSummary | str:
        """In a worker: one trace in, its summary out (the trace and its analysis
        stay there); why it could not be read, for a trace that cannot."""
        try:
            return self.summarize(self.analyse(path))
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
) -> ProcessRun:
    """The run the traces make together. `workers`: worker processes (0: this one,
    None: workers_for); `done(finished, total)` is told as each trace is summarised;
    `busiest_points`: drawing points of the busiest process' full analysis;
    `capacity`: asked of each process (analyze's); `per_process`: findings of
    each process's analysis, kept in its summary."""
    task = _Task(capacity=capacity, per_process=per_process)
    processes, unreadable, kept = _read(paths, workers, done, task)
    most = busiest(processes)
    reuse = kept is not None and kept.path == most.path and busiest_points == SERIES_POINTS
    analysis = kept if reuse and kept is not None else task.analyse(most.path, busiest_points)
    return process_run(processes, unreadable, analysis)


def _summaries(
    paths: Sequence[Path], workers: int, done: Callable[[int, int], None] | None, task: _Task
) -> tuple[list[ProcessSummary | str], RunAnalysis | None]:
    """Each trace's summary (or why it could not be read), in the order given; in
    this process (workers == 0), the busiest analysis seen is kept, so that it is
    not analysed twice."""
    names = [str(p) for p in paths]
    tell = done or (lambda finished, total: None)
    if workers == 0:
        results: list[ProcessSummary | str] = []
        kept: RunAnalysis | None = None
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


def _read(
    paths: Sequence[Path],
    workers: int | None,
    done: Callable[[int, int], None] | None,
    task: _Task,
) -> tuple[tuple[ProcessSummary, ...], tuple[tuple[str, str], ...], RunAnalysis | None]:
    """The readable traces' summaries in the order of processes (rank, host, pid),
    the unreadable ones with why, and the busiest analysis kept where one was; one
    line for a run none of whose traces can be read."""
    if not paths:
        raise TpumemError("no traces in this run")
    workers = workers_for(paths) if workers is None else workers
    results, kept = _summaries(paths, workers, done, task)
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
    return found, unreadable, kept


def summaries_of(paths: Sequence[Path]) -> tuple[ProcessSummary, ...]:
    """Each readable trace's summary, in the order of processes (rank, host, pid)."""
    return _read(paths, None, None, _Task())[0]
