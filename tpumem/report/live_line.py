"""The live line of a run being followed (`tpumem profile` on a terminal, `tpumem
watch`): elapsed, step, bytes in use, and the peak so far with where it was
reached, on the busiest device; and a chart of its bytes in use in characters."""

from __future__ import annotations

from tpumem.analysis.live_figures import RunningFigures
from tpumem.report.escapes import visible
from tpumem.units import format_bytes, format_seconds

BARS = " ▁▂▃▄▅▆▇█"


def live_line(figures: RunningFigures, elapsed_s: float) -> str:
    said = [f"{elapsed_s:,.1f} s"]
    if figures.step is not None:
        said.append(f"step {figures.step:,}")
    device = figures.busiest
    if device is None:
        said.append("no allocation yet")
        return " · ".join(said)
    said.append(f"{visible(device.device)} in use {format_bytes(device.in_use)}")
    peak = f"peak {format_bytes(device.peak)} at {format_seconds(device.peak_time_ns)}"
    if device.peak_step is not None:
        peak += f", step {device.peak_step:,}"
    if device.peak_where:
        peak += f", {visible(device.peak_where)}"
    said.append(peak)
    return " · ".join(said)


def chart_line(figures: RunningFigures, width: int) -> str:
    """The busiest device's bytes in use over the run so far, `width` characters
    (a short history stretched to them: the run so far spans the chart), each the
    highest of its stretch, scaled to the peak; then whether the highs rise."""
    device = figures.busiest
    if device is None or not device.history or device.peak <= 0:
        return ""
    history = device.history
    rising = "" if device.rising_bytes is None else f"  rising +{format_bytes(device.rising_bytes)}"
    width = max(1, width - len(rising))
    count = len(history)
    points = [
        max(history[i * count // width : max(i * count // width + 1, (i + 1) * count // width)])
        for i in range(width)
    ]
    top = len(BARS) - 1
    bars = "".join(BARS[min(top, max(0, round(v / device.peak * top)))] for v in points)
    return bars + rising
