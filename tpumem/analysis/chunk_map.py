"""Fragmentation recomputed from an allocator trace's addresses.

The events give every chunk's address and size, not the regions the allocator
carved them from. BFC serves the allocation that made it grow from the start of the
new region, so each allocation outside the known regions starts one; its size
follows BFC's region schedule. The schedule's starting point is unknown when
regions were made before the capture began, so the candidates are scored against
the allocator's own reported fragmentation and the best is kept: the result is a
derived figure and a check of the reported one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis.bfc import (
    INITIAL_GROWTH_REGION,
    UNLIMITED,
    RegionSchedule,
    fragmentation_ratio,
    rounded_bytes,
)
from tpumem.analysis.device_events import DeviceEvents

_GROWTH_STEPS = 12  # candidate first regions: 2 MiB .. 4 GiB
_SCORING_POINTS = 16


@dataclass(frozen=True, slots=True)
class Regions:
    start: np.ndarray
    size: np.ndarray
    created_at: np.ndarray  # index of the event that made each region
    schedule: str  # e.g. "growth from 2 MiB" or "preallocated"

    def pool_at(self, index: int) -> int:
        return int(self.size[self.created_at <= index].sum())

    def pool_series(self, events: int) -> np.ndarray:
        """Bytes in all regions after each event (regions are never given back)."""
        grown = np.zeros(events, dtype=np.int64)
        np.add.at(grown, self.created_at, self.size)
        return np.cumsum(grown)


@dataclass(frozen=True, slots=True)
class AddressMapFragmentation:
    fragmentation: np.ndarray  # at the points asked for
    regions: Regions


def infer_regions(events: DeviceEvents, schedule: RegionSchedule, label: str) -> Regions:
    allocs = np.flatnonzero(events.is_alloc)
    address = events.address[allocs]
    size = events.bytes[allocs]
    needed = np.where(events.requested[allocs] > 0, events.requested[allocs], size)
    covered = np.zeros(len(allocs), dtype=bool)
    starts, sizes, created = [], [], []
    while not covered.all():
        first = int(np.argmin(covered))
        start = int(address[first])
        # BFC may hand out a whole free chunk larger than the rounded request.
        region = schedule.next_region(max(rounded_bytes(int(needed[first])), int(size[first])))
        starts.append(start)
        sizes.append(region)
        created.append(int(allocs[first]))
        covered |= (address >= start) & (address + size <= start + region)
        covered[first] = True
    order = np.argsort(starts)
    return Regions(
        np.array(starts, dtype=np.int64)[order],
        np.array(sizes, dtype=np.int64)[order],
        np.array(created, dtype=np.int64)[order],
        label,
    )


def _largest_gap(address: np.ndarray, size: np.ndarray, regions: Regions, index: int) -> int:
    alive = regions.created_at <= index
    region_start = regions.start[alive]
    region_end = region_start + regions.size[alive]
    if not len(region_start):
        return 0
    order = np.argsort(address)
    address, end = address[order], address[order] + size[order]
    region = np.searchsorted(region_start, address, side="right") - 1
    if len(address) and (region < 0).any():
        region = np.maximum(region, 0)
    largest = 0
    if len(address):
        same_as_previous = np.zeros(len(address), dtype=bool)
        same_as_previous[1:] = region[1:] == region[:-1]
        previous_end = np.where(
            same_as_previous, np.concatenate([[0], end[:-1]]), region_start[region]
        )
        largest = int((address - previous_end).max(initial=0))
        last = np.flatnonzero(np.append(region[1:] != region[:-1], True))
        tails = region_end[region[last]] - end[last]
        largest = max(largest, int(tails.max(initial=0)))
    occupied = np.zeros(len(region_start), dtype=bool)
    occupied[region] = True
    empty = region_end[~occupied] - region_start[~occupied]
    return max(largest, int(empty.max(initial=0)))


def fragmentation_at(
    events: DeviceEvents, regions: Regions, points: np.ndarray, freed_at: np.ndarray
) -> np.ndarray:
    """BFC fragmentation after each event in `points`, from the chunk map;
    `freed_at` is events.free_index()."""
    allocs = np.flatnonzero(events.is_alloc)
    alloc_freed_at = freed_at[allocs]
    result = np.empty(len(points), dtype=np.float64)
    for k, index in enumerate(points.tolist()):
        live = allocs[(allocs <= index) & (alloc_freed_at > index)]
        largest = _largest_gap(events.address[live], events.bytes[live], regions, index)
        free = regions.pool_at(index) - int(events.in_use[index])
        result[k] = fragmentation_ratio(free, largest)
    return result


def _candidates(limit: int) -> list[tuple[str, RegionSchedule]]:
    result = (
        [("preallocated", RegionSchedule(limit, allow_growth=False))] if limit < UNLIMITED else []
    )
    for step in range(_GROWTH_STEPS):
        first = INITIAL_GROWTH_REGION << step
        label = f"growth from {first >> 20} MiB"
        result.append((label, RegionSchedule(limit, allow_growth=True, initial_region=first)))
    return result


def address_map_fragmentation(events: DeviceEvents, points: np.ndarray) -> AddressMapFragmentation:
    """Fragmentation at `points` from the addresses, with the region schedule that
    best matches the allocator's reported fragmentation (growth from 2 MiB when the
    trace reports none)."""
    limit = events.bytes_limit or UNLIMITED
    reported = events.reported_fragmentation
    candidates = _candidates(limit)
    freed_at = events.free_index()
    first_change = events.bytes[0] if events.is_alloc[0] else -events.bytes[0]
    if events.in_use[0] != first_change:
        # Chunks from before the capture are live and missing from the map: no
        # schedule can make it agree, so only the default one is checked.
        candidates = [c for c in candidates if c[0].startswith("growth")][:1]
    if reported is None:
        best = next(c for c in candidates if c[0].startswith("growth"))
        regions = infer_regions(events, best[1], best[0])
    else:
        scoring = np.unique(np.linspace(0, len(events) - 1, _SCORING_POINTS).astype(np.int64))
        scored = []
        for label, schedule in candidates:
            regions = infer_regions(events, schedule, label)
            remade = fragmentation_at(events, regions, scoring, freed_at)
            error = np.nanmax(np.abs(remade - reported[scoring]))
            scored.append((error, regions))
            if error < 1e-4:
                break
        regions = min(scored, key=lambda pair: pair[0])[1]
    values = fragmentation_at(events, regions, points, freed_at)
    return AddressMapFragmentation(values, regions)
