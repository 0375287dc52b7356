"""Finer drawings of bytes in use, for a page zoomed in: levels of DETAIL_FACTOR
times more stretches than the one before. Each stretch is drawn by its highest
event (its time and bytes), its lowest bytes, and its last event (its time and the
bytes it left in use, which hold until the next stretch's first event), so that a
zoomed view shows the spikes and dips of what it covers, no spike falls between
two points, and an idle time after a stretch shows what was in use then. A level
stops being made once the one before it already holds every event.

Only drawing is cut down; the figures come from every event.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis.allocators.bins import bin_of, highest_of_bins
from tpumem.analysis.device_events import DeviceEvents

DETAIL_FACTOR = 8
DETAIL_LEVELS = 2  # below the series' own points: 8x and 64x finer


@dataclass(frozen=True, slots=True)
class DetailLevel:
    stretches: int  # the run cut into this many equal stretches (the empty ones left out)
    time_ns: tuple[int, ...]  # of each stretch's highest event
    high: tuple[int, ...]  # its bytes in use
    low: tuple[int, ...]  # the lowest bytes in use in the stretch
    last_ns: tuple[int, ...]  # of the stretch's last event
    last: tuple[int, ...]  # the bytes in use it left


def detail_levels(events: DeviceEvents, points: int, drawn: int) -> tuple[DetailLevel, ...]:
    """Below a drawing of `points` stretches that drew `drawn` events."""
    levels: list[DetailLevel] = []
    stretches = points
    for _ in range(DETAIL_LEVELS):
        if drawn >= len(events):
            break  # the level above already drew every event
        stretches *= DETAIL_FACTOR
        bins = bin_of(events.time_ns, stretches)
        chosen, starts = highest_of_bins(bins, events.in_use)
        ends = np.append(starts[1:], len(events)) - 1
        levels.append(
            DetailLevel(
                stretches=stretches,
                time_ns=tuple(events.time_ns[chosen].tolist()),
                high=tuple(events.in_use[chosen].tolist()),
                low=tuple(np.minimum.reduceat(events.in_use, starts).tolist()),
                last_ns=tuple(events.time_ns[ends].tolist()),
                last=tuple(events.in_use[ends].tolist()),
            )
        )
        drawn = len(chosen)
    return tuple(levels)
