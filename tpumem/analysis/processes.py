"""A distributed run as one: each process's figures, their spread, the busiest.

Each trace is analysed on its own and reduced to a `ProcessSummary`, small and
picklable (tpumem/reading/many_traces.py does that, in worker processes when
there are many); the spread across processes reads only those. The busiest
process (the highest peak on one device, which is what runs out of memory) is
analysed in full for its breakdown.

The processes' lines share one axis: by step when every process marked its steps
(the hosts' clocks then do not matter), else by each host's wall clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tpumem.analysis.figures import FRAGMENTATION, PEAK, POOL, DeviceFigure
from tpumem.analysis.oom import OutOfMemory
from tpumem.analysis.trace_figures import DeviceAnalysis, TraceAnalysis
from tpumem.trace.metadata import ExitStatus

SERIES_POINTS = 200  # per process, for the page's lines
TOP_LINES = 10  # lines a process's summary keeps of each device's peak
LIVE_GROUPS = 10  # live groups it keeps of each failed allocation
FAILURES = 20  # failed allocations it keeps (and the one that ended the run)
# Ranks a run is told apart by: a count above it is not a run's (its missing ranks
# are not listed one by one).
MAX_PROCESSES = 1 << 20
STEP_AXIS, CLOCK_AXIS = "step", "wall clock"


@dataclass(frozen=True, slots=True)
class ProcessLine:
    """A process's bytes in use on its busiest device, for drawing."""

    time_ns: tuple[int, ...]  # wall clock (the trace's start + its own time)
    step_position: tuple[float, ...] | None  # where each point sits in the loop
    in_use: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LineAtPeak:
    """Bytes one line made that were live at a device's peak."""

    line: str | None  # file:line; None where nothing names one
    bytes: int
    buffers: int


@dataclass(frozen=True, slots=True)
class DeviceSummary:
    """One device of a process, as the run report and `tpumem check` read it."""

    device: str
    peak_bytes: int
    peak_label: str
    peak_step: int | None
    peak_time_ns: int  # the trace's own clock
    pool_bytes: int | None
    fragmentation_at_peak: float | None
    fragmentation_label: str
    fragmentation_source: str
    growth_per_step_bytes: float | None  # None: too few steps marked to tell
    growing: bool
    growing_at: str | None  # "file:line in function" of what grows most
    lines: tuple[LineAtPeak, ...]  # largest first, at most TOP_LINES


@dataclass(frozen=True, slots=True)
class ProcessSummary:
    """One process of a run, as the comparison of processes reads it."""

    path: str
    host: str | None
    index: int | None  # its rank; None where nothing said
    count: int | None
    pid: int | None
    run: str | None
    framework: str
    backend: str
    source: str  # "tpumem profile", "import", ...
    complete: bool
    running: bool  # still being written
    exit: ExitStatus | None
    devices: int
    peak_bytes: int  # on its busiest device
    peak_device: str | None
    peak_label: str
    peak_step: int | None
    peak_time_ns: int  # the trace's own clock
    pool_bytes: int | None
    fragmentation_at_peak: float | None
    steps: int
    warnings: int
    line: ProcessLine | None
    device_summaries: tuple[DeviceSummary, ...] = ()
    out_of_memory: tuple[OutOfMemory, ...] = ()  # live groups cut to LIVE_GROUPS
    findings: tuple[str, ...] = ()  # what a caller's `per_process` said of its analysis
    # Where the figures were made: "summary" (beside the trace, where it was
    # recorded) or "trace" (summarised from the trace where it was read).
    made_from: str = "trace"

    @property
    def name(self) -> str:
        """How a person tells it apart: its rank, else its host and pid."""
        if self.index is not None:
            return f"rank {self.index}"
        return f"{self.host or '?'} pid {self.pid}" if self.pid else Path(self.path).stem


@dataclass(frozen=True, slots=True)
class Spread:
    """One figure across the processes: the largest, the smallest, the mean."""

    figure: DeviceFigure  # of each process's busiest device
    highest: float
    highest_at: int  # position in ProcessRun.processes
    lowest: float
    lowest_at: int
    mean: float

    @property
    def difference(self) -> float:
        return self.highest - self.lowest

    @property
    def imbalance(self) -> float:
        """How far the smallest falls short of the largest, as a share of it."""
        return self.difference / self.highest if self.highest else 0.0


@dataclass(frozen=True, slots=True)
class ProcessRun:
    processes: tuple[ProcessSummary, ...]  # by rank, then host and pid
    spreads: tuple[Spread, ...]  # peak first; then pool and fragmentation where known
    busiest_at: int  # position of the process with the highest peak
    busiest: TraceAnalysis  # that process, analysed in full
    axis: str  # STEP_AXIS or CLOCK_AXIS
    run_ids: tuple[str, ...]  # the distinct run ids the traces carry
    missing_ranks: tuple[int, ...]  # ranks below the run's count with no trace
    repeated_ranks: tuple[int, ...]  # ranks more than one trace claims
    unreadable: tuple[tuple[str, str], ...] = ()  # (trace, why): left out of the run
    # (trace, why): processes summarised from their traces where the run was read,
    # not from the summary their recording left (none, stale, newer, unreadable).
    summarised_here: tuple[tuple[str, str], ...] = ()

    @property
    def peak(self) -> Spread:
        return self.spreads[0]


def _busiest(analysis: TraceAnalysis) -> DeviceAnalysis | None:
    return max(analysis.devices, key=lambda d: d.peak.bytes, default=None)


def _line(device: DeviceAnalysis | None, start_ns: int) -> ProcessLine | None:
    series = device.series if device is not None else None
    if series is None or not series.time_ns:
        return None
    return ProcessLine(
        tuple(start_ns + t for t in series.time_ns), series.step_position, series.in_use
    )


def _device_summary(device: DeviceAnalysis) -> DeviceSummary:
    growth, lines = device.growth, device.lines
    top = (
        growth.stacks[0].frames[-1]
        if growth and growth.stacks and growth.stacks[0].frames
        else None
    )
    return DeviceSummary(
        device=device.device,
        peak_bytes=device.peak.bytes,
        peak_label=device.peak_label,
        peak_step=device.peak.step,
        peak_time_ns=device.peak.time_ns,
        pool_bytes=device.preallocation.pool_peak_bytes,
        fragmentation_at_peak=device.fragmentation.at_peak,
        fragmentation_label=device.fragmentation.label,
        fragmentation_source=device.fragmentation.source,
        growth_per_step_bytes=growth.per_step_bytes if growth is not None else None,
        growing=growth is not None and growth.growing,
        growing_at=f"{top.location} in {top.function}" if top is not None else None,
        lines=tuple(
            LineAtPeak(line.line, line.bytes, line.buffers)
            for line in (lines.lines[:TOP_LINES] if lines is not None else ())
        ),
    )


def summarize(analysis: TraceAnalysis) -> ProcessSummary:
    """A process's figures, from its full analysis (made with series points)."""
    meta = analysis.metadata
    device = _busiest(analysis)
    process = meta.process
    return ProcessSummary(
        path=analysis.path or "?",
        host=meta.host,
        index=process.index if process is not None else None,
        count=process.count if process is not None else None,
        pid=meta.pid,
        run=meta.run,
        framework=analysis.framework,
        backend=analysis.backend,
        source=meta.source,
        complete=analysis.complete,
        running=analysis.running,
        exit=meta.exit,
        devices=len(analysis.devices),
        peak_bytes=device.peak.bytes if device is not None else 0,
        peak_device=device.device if device is not None else None,
        peak_label=device.peak_label if device is not None else "",
        peak_step=device.peak.step if device is not None else None,
        peak_time_ns=device.peak.time_ns if device is not None else 0,
        pool_bytes=device.preallocation.pool_peak_bytes if device is not None else None,
        fragmentation_at_peak=device.fragmentation.at_peak if device is not None else None,
        steps=analysis.steps,
        warnings=len(analysis.warnings),
        line=_line(device, meta.start_time_ns or 0),
        device_summaries=tuple(_device_summary(d) for d in analysis.devices),
        out_of_memory=tuple(
            replace(failure, live=failure.live[:LIVE_GROUPS])
            for number, failure in enumerate(analysis.out_of_memory)
            if number < FAILURES or failure.ended_the_run
        ),
    )


# The figures spread across a run's processes (each its busiest device's), and
# the field of a process's summary that holds each.
SPREAD = (
    (PEAK, "peak_bytes"),
    (POOL, "pool_bytes"),
    (FRAGMENTATION, "fragmentation_at_peak"),
)


def _spread(figure: DeviceFigure, values: list[float | None]) -> Spread | None:
    known = [(v, i) for i, v in enumerate(values) if v is not None]
    if not known:
        return None
    highest = max(known, key=lambda item: item[0])
    lowest = min(known, key=lambda item: item[0])
    mean = sum(v for v, _ in known) / len(known)
    return Spread(figure, highest[0], highest[1], lowest[0], lowest[1], mean)


def process_order(summary: ProcessSummary) -> tuple[bool, int, str, int]:
    """Processes in the order people count them: by rank, then host and pid."""
    return (summary.index is None, summary.index or 0, summary.host or "", summary.pid or 0)


def _ranks(processes: Sequence[ProcessSummary]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    ranks = [p.index for p in processes if p.index is not None]
    counts = [p.count for p in processes if p.count is not None]
    repeated = sorted({r for r in ranks if ranks.count(r) > 1})
    missing = sorted(set(range(min(max(counts), MAX_PROCESSES))) - set(ranks)) if counts else []
    return tuple(missing), tuple(repeated)


def process_run(
    processes: tuple[ProcessSummary, ...],
    unreadable: tuple[tuple[str, str], ...],
    busiest_analysis: TraceAnalysis,
    summarised_here: tuple[tuple[str, str], ...] = (),
) -> ProcessRun:
    """The run the processes make together: `processes` in process_order, and the
    full analysis of the busiest of them (`busiest`)."""
    spreads = [_spread(figure, [getattr(p, field) for p in processes]) for figure, field in SPREAD]
    lines = [p.line for p in processes if p.line is not None]
    stepped = bool(lines) and all(line.step_position for line in lines)
    missing, repeated = _ranks(processes)
    return ProcessRun(
        processes=processes,
        spreads=tuple(s for s in spreads if s is not None),
        busiest_at=processes.index(busiest(processes)),
        busiest=busiest_analysis,
        axis=STEP_AXIS if stepped else CLOCK_AXIS,
        run_ids=tuple(sorted({p.run for p in processes if p.run})),
        missing_ranks=missing,
        repeated_ranks=repeated,
        unreadable=unreadable,
        summarised_here=summarised_here,
    )


def busiest(processes: Sequence[ProcessSummary]) -> ProcessSummary:
    """The process with the highest peak on one device: the one that runs out first
    (of equal peaks, the first in order)."""
    return max(processes, key=lambda p: p.peak_bytes)


# A process of one run and its counterpart in another (None where there is none).
Pair = tuple[ProcessSummary | None, ProcessSummary | None]


def pair_processes(before: Sequence[ProcessSummary], after: Sequence[ProcessSummary]) -> list[Pair]:
    """The processes of two runs side by side: by rank where every process has one,
    else in order (rank, host, pid)."""
    if all(p.index is not None for p in (*before, *after)):
        first = {p.index: p for p in before if p.index is not None}
        second = {p.index: p for p in after if p.index is not None}
        return [(first.get(r), second.get(r)) for r in sorted(first.keys() | second.keys())]
    count = max(len(before), len(after))
    padded = [*before, *[None] * count][:count], [*after, *[None] * count][:count]
    return list(zip(*padded, strict=True))


def peak_pairs(pairs: list[Pair]) -> tuple[tuple[str, int | None, int | None], ...]:
    """Each pair's name and its two peaks (None where the process is in one run only)."""
    return tuple(
        (
            (b or a).name,  # type: ignore[union-attr]
            a.peak_bytes if a is not None else None,
            b.peak_bytes if b is not None else None,
        )
        for a, b in pairs
    )


def busiest_pair(pairs: list[Pair]) -> Pair:
    """The pair whose later process peaks highest (it runs out of memory first)."""
    return max(
        (pair for pair in pairs if pair[0] is not None and pair[1] is not None),
        key=lambda pair: pair[1].peak_bytes,  # type: ignore[union-attr]
        default=(None, None),
    )


def busiest_peak(analysis: TraceAnalysis) -> int:
    """The analysis's highest peak on one device (what `busiest` compares)."""
    device = _busiest(analysis)
    return device.peak.bytes if device is not None else 0
