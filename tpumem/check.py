"""`tpumem check`: a run's figures against limits, for CI pipelines. Every device
is checked; a figure the trace cannot give is a failure too, since nothing shows
the run stayed inside the limit."""

from __future__ import annotations

from dataclasses import dataclass

from tpumem.analysis.summary import RunAnalysis
from tpumem.report.oom_rows import what, why
from tpumem.units import format_bytes


@dataclass(frozen=True, slots=True)
class Limits:
    max_peak_bytes: int | None = None
    max_fragmentation: float | None = None  # at the peak
    capacity_bytes: int | None = None  # the allocator model must hold the run in this


def breaches(analysis: RunAnalysis, limits: Limits) -> list[str]:
    """One line per limit a device breaks (or cannot be shown to keep)."""
    lines = []
    if not analysis.devices and (
        limits.max_peak_bytes is not None
        or limits.max_fragmentation is not None
        or limits.capacity_bytes is not None
    ):
        return ["no allocation events in the trace: nothing shows the limits were kept"]
    for check in analysis.capacity:
        if check.failure is not None:
            lines.append(
                f"{check.device}: at {format_bytes(check.capacity_bytes)} the allocator model "
                f"runs out of memory {what(check.failure)} ({why(check.failure)})"
            )
    for device in analysis.devices:
        peak = device.peak.bytes
        if limits.max_peak_bytes is not None and peak > limits.max_peak_bytes:
            lines.append(
                f"{device.device}: peak {format_bytes(peak)} ({peak:,} bytes) is over the "
                f"limit {format_bytes(limits.max_peak_bytes)} ({limits.max_peak_bytes:,} bytes)"
            )
        if limits.max_fragmentation is None:
            continue
        frag = device.fragmentation
        if frag.at_peak is None:
            lines.append(
                f"{device.device}: fragmentation at the peak is not available "
                f"({frag.source}), so the limit {limits.max_fragmentation:g} cannot be checked"
            )
        elif frag.at_peak > limits.max_fragmentation:
            lines.append(
                f"{device.device}: fragmentation at the peak {frag.at_peak:.3f} ({frag.label}) "
                f"is over the limit {limits.max_fragmentation:g}"
            )
    return lines
