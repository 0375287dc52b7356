"""`tpumem check`: a run's figures against limits, for CI pipelines. Every device
is checked; a figure the trace cannot give is a failure too, since nothing shows
the run stayed inside the limit."""

from __future__ import annotations

from dataclasses import dataclass

from tpumem.analysis.growth import MARKS_NEEDED
from tpumem.analysis.processes import DeviceSummary, ProcessRun, ProcessSummary, summarize
from tpumem.analysis.trace_figures import TraceAnalysis
from tpumem.commands.options import NO_INCREASE, Increase
from tpumem.report.oom_rows import what, why
from tpumem.report.tpu_tables import tpu_verdict
from tpumem.units import format_bytes


@dataclass(frozen=True, slots=True)
class Limits:
    max_peak_bytes: int | None = None
    max_fragmentation: float | None = None  # at the peak
    capacity_bytes: int | None = None  # the allocator model must hold the run in this
    max_growth_bytes: int | None = None  # a step, after warm-up
    baseline: TraceAnalysis | None = None  # the run this one may not rise above by more than
    max_increase: Increase = NO_INCREASE
    tpu: tuple[str, ...] = ()  # topologies the run must fit, as XLA:TPU compiled it

    def any(self) -> bool:
        return any(
            value is not None
            for value in (
                self.max_peak_bytes,
                self.max_fragmentation,
                self.capacity_bytes,
                self.max_growth_bytes,
                self.baseline,
            )
        )


def imbalance_breaches(run: ProcessRun, allowed: Increase) -> list[str]:
    """The peaks' spread across a run's processes against `allowed` (a share of
    the highest peak, or bytes)."""
    peak = run.peak
    if len(run.processes) < 2:
        return ["one process only: nothing shows how the processes' peaks spread"]
    if peak.difference <= allowed.allowed(int(peak.highest)):
        return []
    high, low = run.processes[peak.highest_at], run.processes[peak.lowest_at]
    return [
        f"{high.name} peaks at {format_bytes(peak.highest)}, {format_bytes(peak.difference)} "
        f"({peak.imbalance:.1%}) over {low.name}'s {format_bytes(peak.lowest)}, more than "
        f"the {allowed} allowed"
    ]


def summary_findings(summary: ProcessSummary, limits: Limits) -> tuple[str, ...]:
    """`summary_breaches`, as a process's summary keeps them."""
    return tuple(summary_breaches(summary, limits))


def breach_findings(analysis: TraceAnalysis, limits: Limits) -> tuple[str, ...]:
    """`breaches`, as a process's summary keeps them (made in a worker: a
    module-level function, so that it can be sent there)."""
    return tuple(breaches(analysis, limits))


def breaches(analysis: TraceAnalysis, limits: Limits) -> list[str]:
    """One line per limit a device breaks (or cannot be shown to keep): what its
    summary answers, and what only its analysis does (the slices it must fit, the
    allocator model at a capacity, the baseline)."""
    lines = _tpu_breaches(analysis, limits.tpu)
    lines += summary_breaches(summarize(analysis), limits, _capacity_breaches(analysis))
    if limits.baseline is not None and analysis.devices:
        lines += _baseline_breaches(analysis, limits.baseline, limits.max_increase)
    return lines


def summary_breaches(
    summary: ProcessSummary, limits: Limits, capacity: list[str] | None = None
) -> list[str]:
    """A process's figures, as its summary holds them, against the limits;
    `capacity`: the allocator model's breaches, where its analysis was made."""
    lines = []
    # A run that ended out of memory keeps no limit (one that met a failed
    # allocation and went on, as a snapshot's oom entry may be, is judged on).
    for failure in summary.out_of_memory:
        if failure.ended_the_run:
            lines.append(f"the run ended out of memory: {what(failure)} ({why(failure)})")
    if not summary.device_summaries and limits.any():
        return [*lines, "no allocation events in the trace: nothing shows the limits were kept"]
    lines += capacity or []
    for device in summary.device_summaries:
        peak = device.peak_bytes
        if limits.max_peak_bytes is not None and peak > limits.max_peak_bytes:
            lines.append(
                f"{device.device}: peak {format_bytes(peak)} ({peak:,} bytes) is over the "
                f"limit {format_bytes(limits.max_peak_bytes)} ({limits.max_peak_bytes:,} bytes)"
            )
        lines += _growth_breaches(device, limits.max_growth_bytes)
        if limits.max_fragmentation is None:
            continue
        frag = device.fragmentation_at_peak
        if frag is None:
            lines.append(
                f"{device.device}: fragmentation at the peak is not available "
                f"({device.fragmentation_source}), so the limit {limits.max_fragmentation:g} "
                "cannot be checked"
            )
        elif frag > limits.max_fragmentation:
            lines.append(
                f"{device.device}: fragmentation at the peak {frag:.3f} "
                f"({device.fragmentation_label}) is over the limit {limits.max_fragmentation:g}"
            )
    return lines


def _capacity_breaches(analysis: TraceAnalysis) -> list[str]:
    return [
        f"{check.device}: at {format_bytes(check.capacity_bytes)} the allocator model "
        f"runs out of memory {what(check.failure)} ({why(check.failure)})"
        for check in analysis.capacity
        if check.failure is not None
    ]


def _tpu_breaches(analysis: TraceAnalysis, topologies: tuple[str, ...]) -> list[str]:
    """Each slice asked for that the run does not fit, or that nothing shows it fits."""
    lines = []
    for topology in topologies:
        target = next((t for t in analysis.tpu if t.topology == topology), None)
        if target is None or target.fit is None:
            lines.append(
                f"{topology}: no program of the run compiled by XLA:TPU, so nothing shows it fits"
            )
        elif not target.fit.fits:
            lines.append(tpu_verdict(target) or topology)
    return lines


def _growth_breaches(device: DeviceSummary, limit: int | None) -> list[str]:
    if limit is None:
        return []
    per_step = device.growth_per_step_bytes
    if per_step is None:
        return [
            f"{device.device}: fewer than {MARKS_NEEDED} step marks, so growth across "
            f"steps cannot be checked against {format_bytes(limit)}"
        ]
    if device.growing and per_step > limit:
        most = f" (most from {device.growing_at})" if device.growing_at else ""
        return [
            f"{device.device}: the bytes that stay from step to step grow by "
            f"{format_bytes(round(per_step))} a step, over the limit "
            f"{format_bytes(limit)} a step{most}"
        ]
    return []


def _baseline_breaches(
    analysis: TraceAnalysis, baseline: TraceAnalysis, increase: Increase
) -> list[str]:
    """Each device's peak against the same device's in the baseline."""
    before = {d.device: d.peak.bytes for d in baseline.devices}
    shared = [d for d in analysis.devices if d.device in before]
    if not shared:
        return [
            "no device of the run is in the baseline ("
            + ", ".join(sorted(before) or ["none"])
            + "): nothing to compare"
        ]
    lines = []
    for device in shared:
        old, new = before[device.device], device.peak.bytes
        if new - old > increase.allowed(old):
            rise = f" ({(new - old) / old:+.1%})" if old else ""
            lines.append(
                f"{device.device}: peak {format_bytes(new)} is {format_bytes(new - old)}{rise} "
                f"over the baseline's {format_bytes(old)}, more than the {increase} allowed"
            )
    return lines
