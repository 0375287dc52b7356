"""Finer drawings of a device's timeline, for a page zoomed in: levels of
DETAIL_FACTOR times more stretches than the one before. Each is drawn as the whole
run is (bytes in use stacked by region, the pool beside them), so zooming in
changes how much is drawn, never what: each stretch is drawn by its highest event,
its lowest and its last (which holds until the next stretch's first), so that a
zoomed view shows the spikes and dips of what it covers and no spike falls between
two points. A level stops being made once the one before it already holds every
event.

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
    time_ns: tuple[int, ...]  # of each drawn event, in order
    in_use: tuple[int, ...]  # its bytes in use
    # Bytes per region at each drawn event, in the order of the series' regions
    # (the same names, so the legend and colours stay as the zoom changes).
    regions: tuple[tuple[int, ...], ...]
    pool: tuple[int, ...] | None  # the pool held in each drawn event's stretch


@dataclass(frozen=True, slots=True)
class FinerStretches:
    stretches: int
    bins: np.ndarray  # the stretch of each event
    chosen: np.ndarray  # the events drawn: each stretch's highest, lowest and last


def finer_stretches(events: DeviceEvents, points: int, drawn: int) -> list[FinerStretches]:
    """Below a drawing of `points` stretches that drew `drawn` events."""
    levels: list[FinerStretches] = []
    stretches = points
    for _ in range(DETAIL_LEVELS):
        if drawn >= len(events):
            break  # the level above already drew every event
        stretches *= DETAIL_FACTOR
        bins = bin_of(events.time_ns, stretches)
        highest, starts = highest_of_bins(bins, events.in_use)
        lowest, _ = highest_of_bins(bins, -events.in_use)
        last = np.append(starts[1:], len(events)) - 1
        chosen = np.union1d(np.union1d(highest, lowest), last)
        if len(chosen) <= drawn:
            break  # events at one time share every stretch: no finer level shows more
        levels.append(FinerStretches(stretches, bins, chosen))
        drawn = len(chosen)
    return levels
