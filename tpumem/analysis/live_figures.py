"""A run's figures while it runs, from its trace as it grows (trace/tail.py): the
step, the bytes in use on each device, and the peak so far with the line whose
allocation reached it. Each piece of the trace is read once; the bytes in use
carry from one piece to the next by device_events.split_by_device's own rule.

These are provisional: rows a framework hands over late (a profiler session's
chunk) count when they arrive. When the run has ended, its figures are the
analysis' of the whole trace (`tpumem watch` says so).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from tpumem.analysis.device_events import split_by_device, step_marks
from tpumem.trace.model import Trace

CHART_POINTS = 4096  # the chart's history per device, halved when full
RISING_PARTS = 4  # the run so far in this many parts: rising where each part's high is higher
RISING_SHARE = 0.10  # and the last part's high is this much of the first's above it


@dataclass
class DeviceNow:
    device: str
    in_use: int = 0
    heap: int = 0  # in_use less what was reserved outside the heap: what carries over
    peak: int = 0
    peak_time_ns: int = 0
    peak_step: int | None = None
    peak_where: str | None = None  # the line (else the op) whose allocation reached it
    # The highest bytes in use of each piece read: what a live chart draws.
    history: list[int] = field(default_factory=list)
    _every: int = 1  # pieces per history point (doubles as the history is halved)
    _count: int = 0  # pieces in the last point so far

    @property
    def rising_bytes(self) -> int | None:
        """How much higher the last of RISING_PARTS parts of the run so far peaks
        than the first, where each part peaks higher than the one before, by
        RISING_SHARE in all (a leak, or a run still warming up: the report's growth
        across steps tells them apart); None where it does not rise so."""
        history, parts = self.history, RISING_PARTS
        if len(history) < 2 * parts:
            return None
        count = len(history)
        highs = [max(history[i * count // parts : (i + 1) * count // parts]) for i in range(parts)]
        climbing = all(later > earlier for earlier, later in itertools.pairwise(highs))
        if not climbing or highs[-1] - highs[0] < RISING_SHARE * highs[0]:
            return None
        return highs[-1] - highs[0]


@dataclass
class RunningFigures:
    devices: dict[str, DeviceNow] = field(default_factory=dict)
    step: int | None = None  # the last step mark read
    last_time_ns: int = 0  # of the last row read, on the trace's clock
    events: int = 0  # allocation events read

    def add(self, piece: Trace) -> None:
        """Reads the rows of `piece` (the trace's rows after those read before)."""
        times, numbers = step_marks(piece)
        heap_before = {name: d.heap for name, d in self.devices.items()}
        for events in split_by_device(piece, heap_before):
            now = self.devices.setdefault(events.device, DeviceNow(events.device))
            self.events += len(events)
            highest = int(np.argmax(events.in_use))
            if int(events.in_use[highest]) > now.peak:
                now.peak = int(events.in_use[highest])
                now.peak_time_ns = int(events.time_ns[highest])
                index = np.searchsorted(times, now.peak_time_ns, side="right") - 1
                now.peak_step = int(numbers[index]) if index >= 0 else self.step
                now.peak_where = _where(piece, int(events.row[highest]))
            now.in_use, now.heap = int(events.in_use[-1]), int(events.heap[-1])
            _remember(now, int(events.in_use.max()))
        if len(numbers):
            self.step = int(numbers[-1])
        if piece.table.num_rows:
            self.last_time_ns = max(self.last_time_ns, int(piece.numbers("time_ns").max()))

    @property
    def busiest(self) -> DeviceNow | None:
        """The device whose peak so far is highest (the first of equal ones)."""
        return max(self.devices.values(), key=lambda d: d.peak, default=None)


def _where(piece: Trace, row: int) -> str | None:
    for column in ("source", "op"):
        codes, values = piece.codes_at(column, np.array([row]))
        if codes[0] >= 0:
            return str(values[codes[0]])
    return None


def _remember(now: DeviceNow, highest: int) -> None:
    """A history point per `_every` pieces, their highest; halved when full."""
    if now._count == 0:
        now.history.append(highest)
    else:
        now.history[-1] = max(now.history[-1], highest)
    now._count = (now._count + 1) % now._every
    if len(now.history) >= CHART_POINTS:
        now.history[:] = [max(now.history[i : i + 2]) for i in range(0, len(now.history), 2)]
        now._every, now._count = now._every * 2, 0
