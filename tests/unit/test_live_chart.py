"""`tpumem watch`'s chart: the run so far spans the terminal's width however few
points it has yet (it was 15 characters wide), and it says when each part of
the run peaks higher than the one before."""

from __future__ import annotations

from tpumem.analysis.live_figures import DeviceNow, RunningFigures
from tpumem.report.live_line import chart_line

MiB = 1 << 20


def _figures(history: list[int]) -> RunningFigures:
    device = DeviceNow("CPU:0", in_use=history[-1], peak=max(history), history=history)
    return RunningFigures(devices={"CPU:0": device})


def test_a_short_history_spans_the_width():
    chart = chart_line(_figures([MiB, 4 * MiB, 2 * MiB]), 60)
    assert len(chart) == 60
    assert chart[:20] == chart[0] * 20 and chart[20:40] == "█" * 20  # each point a third


def test_highs_that_climb_are_said_and_a_steady_run_is_not():
    climbing = [(i % 4 + i // 4) * MiB for i in range(40)]  # a saw whose teeth rise
    chart = chart_line(_figures(climbing), 60)
    assert len(chart) == 60 and chart.endswith("  rising +8.0 MiB")  # (12 MiB, the first part 4)
    steady = [(i % 4) * MiB for i in range(40)]
    assert "rising" not in chart_line(_figures(steady), 60)
