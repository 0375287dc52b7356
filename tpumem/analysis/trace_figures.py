"""Every figure for a trace, per device and for the run: what reports show."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tpumem.analysis import provenance
from tpumem.analysis.advisor import FitAdvice, fit_advice, headroom, with_tpu_compiles
from tpumem.analysis.allocators import caching_allocator
from tpumem.analysis.allocators.bfc_model import (
    ReplayResult,
    repeat_candidates,
    replay,
    replay_sizes,
)
from tpumem.analysis.allocators.capacity import CapacityCheck, check_capacity
from tpumem.analysis.by_line import PeakLines, peak_lines, programs_at_peak
from tpumem.analysis.changes import Change, what_to_change
from tpumem.analysis.compiled.chip_kinds import chip_kinds
from tpumem.analysis.compiled.held_twice import HeldTwice, held_twice
from tpumem.analysis.compiled.programs import (
    CompiledProgram,
    ProgramMemory,
    RunningAtPeak,
    beyond_the_peak,
    compiled_programs,
    programs,
)
from tpumem.analysis.compiled.tpu import PlansApart, TpuTarget, plans_apart, tpu_fit, tpu_targets
from tpumem.analysis.counters import Counters, counters
from tpumem.analysis.device_events import DeviceEvents, split_by_device, step_marks
from tpumem.analysis.drawing.series import DeviceSeries, device_series
from tpumem.analysis.drawing.timeline import Timeline, timeline
from tpumem.analysis.fragmentation import Fragmentation, fragmentation
from tpumem.analysis.growth import Growth, step_growth
from tpumem.analysis.kinds import PeakKinds, peak_kinds, trained_by_keras
from tpumem.analysis.oom import OutOfMemory, demand_floor, out_of_memory
from tpumem.analysis.padding import LayoutPadding, layout_padding
from tpumem.analysis.peak import PeakBreakdown, highest, live_at, peak_breakdown, total_peak
from tpumem.analysis.preallocation import Preallocation, preallocation
from tpumem.analysis.stacks import stack_warnings
from tpumem.analysis.waste import InternalWaste, internal_waste
from tpumem.trace.hlo_rows import hlo_warnings
from tpumem.trace.memory_settings import NO_POOL
from tpumem.trace.metadata import IMPORTED, TraceMetadata
from tpumem.trace.model import Trace


@dataclass(frozen=True, slots=True)
class DeviceAnalysis:
    device: str
    fidelity: str
    allocations: int
    frees: int
    allocations_per_s: float | None  # over the span from the first event to the last
    peak: PeakBreakdown
    peak_label: str
    preallocation: Preallocation
    fragmentation: Fragmentation
    waste: InternalWaste
    padding: LayoutPadding
    # Free bytes at the peak outside the largest free block (see advisor.py).
    headroom_bytes: int | None
    headroom_label: str
    timeline: Timeline
    counters: Counters
    series: DeviceSeries | None = None  # for drawing; only when asked for
    # Compiled programs whose temporaries were live at the peak (programs.py).
    programs_at_peak: tuple[RunningAtPeak, ...] = ()
    # Calls whose outputs and the arrays they replace were both live at the peak.
    held_twice: tuple[HeldTwice, ...] = ()
    # The peak by line and by stack, the programs running there opened (by_line.py).
    lines: PeakLines | None = None
    kinds: PeakKinds | None = None  # the peak by kind of memory (kinds.py)
    growth: Growth | None = None  # bytes live at each step's end (growth.py)
    step_marks: int = 0  # steps the trace marks (growth needs MARKS_NEEDED)


@dataclass(frozen=True, slots=True)
class TraceAnalysis:
    path: str | None
    framework: str
    backend: str
    source: str
    complete: bool
    running: bool  # the trace is still being written: its run has not ended
    metadata: TraceMetadata
    duration_ns: int
    devices: tuple[DeviceAnalysis, ...]
    total_peak_bytes: int
    total_peak_time_ns: int
    warnings: tuple[str, ...]
    programs: tuple[ProgramMemory, ...] = ()  # XLA's memory analysis of each program
    compiled: tuple[CompiledProgram, ...] = ()  # with what fills each, largest peak first
    fit: FitAdvice | None = None
    steps: int = 0  # step marks in the trace
    out_of_memory: tuple[OutOfMemory, ...] = ()  # the allocations that failed
    capacity: tuple[CapacityCheck, ...] = ()  # per device, where a capacity was asked about
    tpu: tuple[TpuTarget, ...] = ()  # the programs compiled for TPU topologies (--tpu)
    changes: tuple[Change, ...] = ()  # what to change, each with its figure (changes.py)
    # The programs at the highest device's peak that XLA:TPU plans apart (tpu.py).
    plans_apart: tuple[PlansApart, ...] = ()


def _model(trace: Trace, events: DeviceEvents) -> ReplayResult | None:
    """The allocator's model runs where the allocator reported nothing of its own:
    PyTorch's caching allocator's for PyTorch on CUDA, else the BFC model."""
    if events.reported_fragmentation is not None or events.counters_only:
        return None
    declared = trace.metadata.memory_settings
    if declared is not None and declared.allocator_model == NO_POOL:
        return None
    if caching_allocator.models(trace.metadata):
        return caching_allocator.replay_result(events)
    sizes = replay_sizes(events.requested, events.bytes)
    steps = np.searchsorted(events.time_ns, step_marks(trace)[0])
    starts = repeat_candidates(steps, events.is_alloc)
    return replay(events.is_alloc, sizes, events.buffer_id, step_starts=starts)


def _rate(events: DeviceEvents, allocations: int) -> float | None:
    if events.counters_only:
        return None
    span = int(events.time_ns[-1] - events.time_ns[0]) if len(events) else 0
    return allocations / (span / 1e9) if span > 0 else None


@dataclass(frozen=True, slots=True)
class DeviceEventFigures:
    """A device's figures per event, for exports that write every event."""

    analysis: DeviceAnalysis
    events: DeviceEvents
    fragmentation: np.ndarray  # per event; NaN where unknown
    pool: np.ndarray | None  # per event, or one reading that stands for the run


def analyze_device(
    trace: Trace, events: DeviceEvents, bins: int = 64, series_points: int = 0
) -> DeviceAnalysis:
    return _device(trace, events, bins, series_points).analysis


def device_event_figures(trace: Trace) -> list[DeviceEventFigures]:
    return [_device(trace, events, 64, 0) for events in split_by_device(trace)]


def _device(
    trace: Trace,
    events: DeviceEvents,
    bins: int,
    series_points: int,
    span_ns: tuple[int, int] = (0, 0),
    page: bool = True,
) -> DeviceEventFigures:
    peak = peak_breakdown(trace, events)
    model = _model(trace, events)
    frag = fragmentation(events, peak.event_index, model)
    reported = counters(trace, events.device)
    if reported.pool_bytes is not None:  # the allocator says what it holds (memory_stats)
        pool, pool_label = np.array([reported.pool_bytes]), provenance.MEASURED
        pool_source = "the allocator's own pool_bytes"
    elif model is not None:
        pool, pool_label, pool_source = model.pool, provenance.MODELED, model.source
    elif frag.pool is not None:
        pool, pool_label = frag.pool, provenance.DERIVED
        pool_source = f"address map, BFC regions ({frag.figure.check_schedule})"
    elif frag.figure.check_agrees is False:
        pool, pool_label = None, provenance.NOT_AVAILABLE
        pool_source = "the address map disagrees with the allocator (see its check)"
    elif frag.figure.check_unavailable:
        pool, pool_label, pool_source = (
            None,
            provenance.NOT_AVAILABLE,
            frag.figure.check_unavailable,
        )
    else:
        pool, pool_label, pool_source = None, provenance.NOT_AVAILABLE, ""
    limit = events.bytes_limit if events.bytes_limit is not None else reported.limit_bytes
    pre = preallocation(
        trace.metadata,
        events.device,
        peak.bytes,
        peak.event_index,
        pool,
        pool_label,
        pool_source,
        limit,
    )
    room, room_label = headroom(peak.bytes, frag.figure, pre)
    allocations = int(events.is_alloc.sum())
    analysis = DeviceAnalysis(
        device=events.device,
        fidelity=events.fidelity,
        allocations=allocations,
        frees=0 if events.counters_only else len(events) - allocations,
        allocations_per_s=_rate(events, allocations),
        peak=peak,
        peak_label=provenance.MEASURED if events.in_use_measured else provenance.DERIVED,
        preallocation=pre,
        fragmentation=frag.figure,
        waste=internal_waste(events, live_at(events, peak.event_index)),
        padding=layout_padding(peak.groups, trace.metadata.backend),
        headroom_bytes=room,
        headroom_label=room_label,
        timeline=timeline(events.time_ns, events.in_use, frag.values, bins),
        counters=reported,
        growth=step_growth(trace, events),
        step_marks=len(step_marks(trace)[0]),
        series=device_series(
            trace, events, frag.values, pool, series_points, span_ns, explore=True, page=page
        )
        if series_points
        else None,
    )
    return DeviceEventFigures(analysis, events, frag.values, pool)


def _with_programs(
    trace: Trace, figures: DeviceEventFigures, compiled: tuple[CompiledProgram, ...]
) -> DeviceAnalysis:
    """A device's figures with the programs running at its peak: which, and the
    peak by line and stack with their temporaries opened up (the stacks the
    reports and the flame graph show)."""
    device = figures.analysis
    live = live_at(figures.events, device.peak.event_index)
    running = programs_at_peak(trace, figures.events, live, compiled)
    lines = peak_lines(trace, figures.events, live, running)
    kinds = peak_kinds(trace, figures.events, live, running, device.peak)
    return replace(
        device,
        programs_at_peak=tuple(
            sorted(
                (
                    RunningAtPeak(p, t, a)
                    for p, t, a in zip(
                        running.found, running.temp_bytes, kinds.programs, strict=True
                    )
                ),
                key=lambda r: -r.temp_bytes,
            )
        ),
        lines=lines,
        kinds=kinds,
        peak=replace(device.peak, stacks=lines.stacks),
        held_twice=held_twice(trace, figures.events, device.peak.event_index, live, compiled),
    )


def _tpu(
    trace: Trace, devices: tuple[DeviceAnalysis, ...], fit: FitAdvice | None
) -> tuple[TpuTarget, ...]:
    """The TPU compiles, each with a chip's need for the device the fit weighs
    (for the programs alone where the run allocated nothing)."""
    device = next((d for d in devices if fit is not None and d.device == fit.device), None)
    targets = []
    for target in tpu_targets(trace):
        if device is None:
            target = replace(target, fit=tpu_fit(target, 0, (), ()))
            kinds, arguments = chip_kinds(target, None, ())
        else:
            running = device.programs_at_peak
            peak = device.peak
            target = replace(target, fit=tpu_fit(target, peak.bytes, peak.groups, running))
            kinds, arguments = chip_kinds(target, device.kinds, running)
        if target.fit is not None:
            chip = replace(target.fit, kinds=kinds, argument_kinds=arguments)
            target = replace(target, fit=chip)
        targets.append(target)
    return tuple(targets)


def _span(trace: Trace, times: np.ndarray) -> tuple[int, int]:
    """(start, end) of the run on the trace's clock: a recorded run's starts at 0,
    with its recording (a run killed before it wrote its end too, whose peak time
    is read on the same clock); an imported profile's is the profiler's, from its
    first event."""
    end = trace.metadata.end_time_ns
    if end is not None or trace.metadata.source != IMPORTED:
        return 0, max(end or 0, int(times.max(initial=0)))
    return (int(times.min()), int(times.max())) if len(times) else (0, 0)


def analyze(
    trace: Trace,
    bins: int = 64,
    series_points: int = 0,
    capacity: int | None = None,
    *,
    page: bool = True,
) -> TraceAnalysis:
    """All figures of a trace; with `series_points`, series for drawing too (and
    with `page`, what a page explores them by: finer levels, moments, the largest
    buffers); with `capacity`, whether the run would fit an allocator capped at
    that many bytes and the smallest it would fit (capacity.py: a replay each, so
    only on asking)."""
    return analyze_with_events(trace, bins, series_points, capacity, page=page)[0]


def analyze_with_events(
    trace: Trace,
    bins: int = 64,
    series_points: int = 0,
    capacity: int | None = None,
    *,
    page: bool = True,
) -> tuple[TraceAnalysis, list[DeviceEventFigures]]:
    """The figures, and the per-event series they came from (an export writes
    those): one pass over each device for both."""
    devices = split_by_device(trace)
    times = trace.numbers("time_ns")
    total_bytes, total_time = total_peak(devices)
    metadata = trace.metadata
    span = _span(trace, times)
    figures = [_device(trace, d, bins, series_points, span, page) for d in devices]
    memory = programs(trace)
    compiled = compiled_programs(trace, memory)
    analysed = tuple(_with_programs(trace, f, compiled) for f in figures)
    failures = out_of_memory(trace, devices, {d.device: d.peak_label for d in analysed})
    checks = () if capacity is None else tuple(check_capacity(trace, d, capacity) for d in devices)
    fit = fit_advice(
        metadata.memory_settings,
        [(d.device, d.peak.bytes, d.headroom_bytes, d.headroom_label, d.padding) for d in analysed],
        failed={d.device: demand_floor(failures, d.device) for d in analysed},
        smallest={c.device: c.smallest_bytes for c in checks},
    )
    targets = _tpu(trace, analysed, fit)
    apart = plans_apart(highest(analysed).programs_at_peak, targets) if analysed else ()
    run = TraceAnalysis(
        path=trace.path,
        framework=trace.framework,
        backend=metadata.backend,
        source=metadata.source,
        complete=trace.complete,
        running=trace.running,
        metadata=metadata,
        duration_ns=span[1] - span[0],
        devices=analysed,
        total_peak_bytes=total_bytes,
        total_peak_time_ns=total_time,
        warnings=(
            *trace.warnings,
            *stack_warnings(trace),
            *hlo_warnings(trace),
            *beyond_the_peak(memory, {d.device: d.peak.bytes for d in analysed}),
        ),
        programs=memory,
        compiled=compiled,
        steps=len(step_marks(trace)[0]),
        fit=with_tpu_compiles(fit, targets),
        out_of_memory=failures,
        capacity=checks,
        tpu=targets,
        changes=what_to_change(
            metadata.backend,
            metadata.memory_settings,
            analysed,
            targets,
            apart,
            keras=trained_by_keras(trace),
        ),
        plans_apart=apart,
    )
    return run, figures
