"""Fragmentation recomputed from an allocator trace's addresses.

The events give every chunk's address and size, not the regions the allocator
carved them from. BFC serves the allocation that made it grow from the start of the
new region, so each allocation outside the known regions starts one; its size
follows BFC's region schedule. The schedule's starting point is unknown when
regions were made before the capture began, so the candidates are scored against
the allocator's own reported fragmentation and the best is kept: the result is a
derived figure and a check of the reported one.

A chunk whose allocation the capture missed (made before it began, or while a
chunked capture switched sessions) still shows when it is freed; it counts as live
from the previous event at its address. The map is complete after an event exactly
when its live bytes equal the allocator's bytes in use there, and only such events
check the reported figure.
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
from tpumem.analysis.device_events import DeviceEvents, pair_events

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
    complete: np.ndarray  # whether the map holds every live chunk at each point
    regions: Regions


@dataclass(frozen=True, slots=True)
class Chunks:
    """Every chunk the events show, live for events in [first, end)."""

    first: np.ndarray  # event index of its allocation (or the earliest it can be)
    end: np.ndarray  # event index of its free (len(events) if never freed)
    address: np.ndarray
    size: np.ndarray
    needed: np.ndarray  # requested bytes where known, else size

    @classmethod
    def of(cls, events: DeviceEvents) -> Chunks:
        freed_at = events.free_index()
        allocs = np.flatnonzero(events.is_alloc)
        unpaired = np.flatnonzero(~events.is_alloc)
        unpaired = unpaired[pair_events(events.is_alloc, events.buffer_id)[unpaired] < 0]
        first = np.concatenate([allocs, _after_previous_use(events.address, unpaired)])
        rows = np.concatenate([allocs, unpaired])
        # In order of appearance, lowest address first among chunks that appear
        # together: region inference takes the first chunk it meets as a start.
        order = np.lexsort((events.address[rows], first))
        rows, first = rows[order], first[order]
        size = events.bytes[rows]
        requested = events.requested[rows]
        return cls(
            first=first,
            end=np.where(events.is_alloc[rows], freed_at[rows], rows),
            address=events.address[rows],
            size=size,
            needed=np.where(requested > 0, requested, size),
        )


def _after_previous_use(address: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For events `rows`, the index after the latest earlier event at the same
    address (0 when there is none): the earliest a chunk freed there can be from."""
    order = np.lexsort((np.arange(len(address)), address))
    position = np.empty(len(address), dtype=np.int64)
    position[order] = np.arange(len(address))
    previous = position[rows] - 1
    same = (previous >= 0) & (address[order[np.maximum(previous, 0)]] == address[rows])
    return np.where(same, order[np.maximum(previous, 0)] + 1, 0)


def infer_regions(chunks: Chunks, schedule: RegionSchedule, label: str) -> Regions:
    address, size, needed = chunks.address, chunks.size, chunks.needed
    covered = np.zeros(len(address), dtype=bool)
    starts, sizes, created = [], [], []
    while not covered.all():
        first = int(np.argmin(covered))
        start = int(address[first])
        # BFC may hand out a whole free chunk larger than the rounded request.
        region = schedule.next_region(max(rounded_bytes(int(needed[first])), int(size[first])))
        starts.append(start)
        sizes.append(region)
        created.append(int(chunks.first[first]))
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
    events: DeviceEvents, regions: Regions, points: np.ndarray, chunks: Chunks
) -> tuple[np.ndarray, np.ndarray]:
    """BFC fragmentation after each event in `points`, from the chunk map, and
    whether the map was complete there."""
    result = np.empty(len(points), dtype=np.float64)
    complete = np.empty(len(points), dtype=bool)
    for k, index in enumerate(points.tolist()):
        live = (chunks.first <= index) & (chunks.end > index)
        complete[k] = int(chunks.size[live].sum()) == int(events.in_use[index])
        largest = _largest_gap(chunks.address[live], chunks.size[live], regions, index)
        free = regions.pool_at(index) - int(events.in_use[index])
        result[k] = fragmentation_ratio(free, largest)
    return result, complete


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
    chunks = Chunks.of(events)
    default_label, default_schedule = next(c for c in candidates if c[0].startswith("growth"))
    if reported is None:
        regions = infer_regions(chunks, default_schedule, default_label)
    else:
        scoring = np.unique(np.linspace(0, len(events) - 1, _SCORING_POINTS).astype(np.int64))
        scored = []
        for label, schedule in candidates:
            regions = infer_regions(chunks, schedule, label)
            remade, complete = fragmentation_at(events, regions, scoring, chunks)
            if not complete.any():
                # Nothing to score against: keep the default schedule only.
                scored = [(np.inf, infer_regions(chunks, default_schedule, default_label))]
                break
            error = np.nanmax(np.abs(remade - reported[scoring])[complete])
            scored.append((error, regions))
            if error < 1e-4:
                break
        regions = min(scored, key=lambda pair: pair[0])[1]
    values, complete = fragmentation_at(events, regions, points, chunks)
    return AddressMapFragmentation(values, complete, regions)
