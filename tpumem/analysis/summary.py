"""Every figure for a trace, per device and for the run: what reports show."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tpumem.analysis import labels
from tpumem.analysis.bfc_model import ReplayResult, quiet_points, replay
from tpumem.analysis.counters import Counters, counters
from tpumem.analysis.device_events import DeviceEvents, split_by_device, step_marks
from tpumem.analysis.fragmentation import Fragmentation, fragmentation
from tpumem.analysis.peak import PeakBreakdown, live_at, peak_breakdown, total_peak
from tpumem.analysis.preallocation import Preallocation, preallocation
from tpumem.analysis.programs import ProgramMemory, programs
from tpumem.analysis.timeline import Timeline, timeline
from tpumem.analysis.waste import InternalWaste, internal_waste
from tpumem.trace.model import Trace


@dataclass(frozen=True, slots=True)
class DeviceAnalysis:
    device: str
    fidelity: str
    allocations: int
    frees: int
    peak: PeakBreakdown
    peak_label: str
    preallocation: Preallocation
    fragmentation: Fragmentation
    waste: InternalWaste
    timeline: Timeline
    counters: Counters


@dataclass(frozen=True, slots=True)
class RunAnalysis:
    path: str | None
    framework: str
    backend: str
    source: str
    complete: bool
    metadata: dict[str, Any]
    duration_ns: int
    devices: tuple[DeviceAnalysis, ...]
    total_peak_bytes: int
    total_peak_time_ns: int
    warnings: tuple[str, ...]
    programs: tuple[ProgramMemory, ...] = ()


def _model(trace: Trace, events: DeviceEvents) -> ReplayResult | None:
    """The BFC model runs where the allocator reported nothing of its own."""
    if events.reported_fragmentation is not None:
        return None
    sizes = np.where(events.requested > 0, events.requested, events.bytes)
    steps = np.searchsorted(events.time_ns, step_marks(trace)[0])
    quiet = quiet_points(events.is_alloc, most=len(events) // 16)
    starts = np.union1d(steps, quiet)
    return replay(events.is_alloc, sizes, events.buffer_id, step_starts=starts)


def analyze_device(trace: Trace, events: DeviceEvents, bins: int = 64) -> DeviceAnalysis:
    peak = peak_breakdown(trace, events)
    model = _model(trace, events)
    frag = fragmentation(events, peak.event_index, model)
    reported = counters(trace, events.device)
    if reported.pool_bytes is not None:  # the allocator says what it holds (memory_stats)
        pool, pool_label = np.array([reported.pool_bytes]), labels.MEASURED
        pool_source = "the allocator's own pool_bytes"
    elif model is not None:
        pool, pool_label, pool_source = model.pool, labels.MODELED, "BFC allocator model"
    elif frag.pool is not None:
        pool, pool_label = frag.pool, labels.DERIVED
        pool_source = f"address map, BFC regions ({frag.figure.check_schedule})"
    elif frag.figure.check_agrees is False:
        pool, pool_label = None, labels.NOT_AVAILABLE
        pool_source = "the address map disagrees with the allocator (see its check)"
    elif frag.figure.check_unavailable:
        pool, pool_label, pool_source = None, labels.NOT_AVAILABLE, frag.figure.check_unavailable
    else:
        pool, pool_label, pool_source = None, labels.NOT_AVAILABLE, ""
    limit = events.bytes_limit if events.bytes_limit is not None else reported.limit_bytes
    return DeviceAnalysis(
        device=events.device,
        fidelity=events.fidelity,
        allocations=int(events.is_alloc.sum()),
        frees=int((~events.is_alloc).sum()),
        peak=peak,
        peak_label=labels.MEASURED if events.in_use_measured else labels.DERIVED,
        preallocation=preallocation(
            trace.metadata, events.device, peak.bytes, pool, pool_label, pool_source, limit
        ),
        fragmentation=frag.figure,
        waste=internal_waste(events, live_at(events, peak.event_index)),
        timeline=timeline(events.time_ns, events.in_use, frag.values, bins),
        counters=reported,
    )


def _duration(trace: Trace, times: np.ndarray) -> int:
    end = trace.metadata.get("end_time_ns")
    if end is not None:  # a profiled run, whose clock starts with the process
        return max(int(end), int(times.max(initial=0)))
    return int(times.max() - times.min()) if len(times) else 0


def analyze(trace: Trace, bins: int = 64) -> RunAnalysis:
    """All figures of a trace."""
    devices = split_by_device(trace)
    times = trace.numbers("time_ns")
    total_bytes, total_time = total_peak(devices)
    metadata = trace.metadata
    return RunAnalysis(
        path=trace.path,
        framework=trace.framework,
        backend=str(metadata.get("backend", "unknown")),
        source=str(metadata.get("source", "unknown")),
        complete=trace.complete,
        metadata=metadata,
        duration_ns=_duration(trace, times),
        devices=tuple(analyze_device(trace, d, bins) for d in devices),
        total_peak_bytes=total_bytes,
        total_peak_time_ns=total_time,
        warnings=tuple(trace.warnings),
        programs=programs(trace),
    )
