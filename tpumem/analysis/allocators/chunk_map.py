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

from tpumem.analysis.allocators.bfc import (
    INITIAL_GROWTH_REGION,
    UNLIMITED,
    RegionSchedule,
    fragmentation_ratio,
    rounded_bytes,
)
from tpumem.analysis.allocators.unseen_frees import neighbours_at_address
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
class Chunks:
    """Every chunk the events show, live for events in [first, end)."""

    first: np.ndarray  # event index of its allocation (or the earliest it can be)
    end: np.ndarray  # event index of its free (len(events) if never freed)
    address: np.ndarray
    size: np.ndarray
    needed: np.ndarray  # requested bytes where known, else size

    @classmethod
    def of(cls, events: DeviceEvents) -> Chunks:
        partner = pair_events(events.is_alloc, events.buffer_id)
        previous, _ = neighbours_at_address(events.address)
        # The first event after each gap in the capture.
        resumed = np.searchsorted(events.time_ns, events.gaps_ns[:, 1], side="left")
        allocs = np.flatnonzero(events.is_alloc)
        end = events.ends()[allocs]  # a free the capture missed: unseen_frees.py
        # A free whose allocation the capture missed: allocated in the last gap
        # before it, after the address's previous use; else before the capture.
        unpaired = np.flatnonzero(~events.is_alloc & (partner < 0))
        last_gap = np.searchsorted(resumed, unpaired, side="right")  # 0: none before
        after_gap = np.concatenate([[0], resumed])[last_gap]
        first_unpaired = np.maximum(after_gap, previous[unpaired] + 1)
        rows = np.concatenate([allocs, unpaired])
        first = np.concatenate([allocs, first_unpaired])
        ends = np.concatenate([end, unpaired])
        # In order of appearance, lowest address first among chunks that appear
        # together: region inference takes the first chunk it meets as a start.
        order = np.lexsort((events.address[rows], first))
        rows = rows[order]
        size = events.bytes[rows]
        requested = events.requested[rows]
        return cls(
            first=first[order],
            end=ends[order],
            address=events.address[rows],
            size=size,
            needed=np.where(requested > 0, requested, size),
        )

    def complete(self, events: DeviceEvents) -> np.ndarray:
        """Per event, whether the map holds every live chunk after it: its live
        bytes equal the allocator's bytes in use."""
        count = len(events)
        change = np.zeros(count + 1, dtype=np.int64)
        np.add.at(change, self.first, self.size)
        np.add.at(change, np.minimum(self.end, count), -self.size)
        counted: np.ndarray = np.cumsum(change)[:count] == events.heap
        return counted


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
) -> np.ndarray:
    """BFC fragmentation after each event in `points`, from the chunk map."""
    result = np.empty(len(points), dtype=np.float64)
    for k, index in enumerate(points.tolist()):
        live = (chunks.first <= index) & (chunks.end > index)
        largest = _largest_gap(chunks.address[live], chunks.size[live], regions, index)
        free = regions.pool_at(index) - int(events.heap[index])
        result[k] = fragmentation_ratio(free, largest)
    return result


def _candidates(limit: int) -> list[tuple[str, RegionSchedule]]:
    """Region schedules, BFC's default (growth from 2 MiB) first: it wins ties."""
    result = []
    for step in range(_GROWTH_STEPS):
        first = INITIAL_GROWTH_REGION << step
        label = f"growth from {first >> 20} MiB"
        result.append((label, RegionSchedule(limit, allow_growth=True, initial_region=first)))
    if limit < UNLIMITED:
        result.append(("preallocated", RegionSchedule(limit, allow_growth=False)))
    return result


def spread(indices: np.ndarray, count: int) -> np.ndarray:
    """About `count` of `indices`, evenly spread, first and last included."""
    if len(indices) <= count:
        return indices
    return indices[np.unique(np.linspace(0, len(indices) - 1, count).astype(np.int64))]


class AddressMap:
    """The chunk map of a device's events and the regions that best explain the
    allocator's reported fragmentation (BFC's default schedule when it reports
    none, or when the map is never complete enough to tell)."""

    def __init__(self, events: DeviceEvents) -> None:
        self.events = events
        self.chunks = Chunks.of(events)
        self.complete = self.chunks.complete(events)
        self.regions = self._fit(events.reported_fragmentation)

    def _fit(self, reported: np.ndarray | None) -> Regions:
        candidates = _candidates(self.events.bytes_limit or UNLIMITED)
        scoring = spread(np.flatnonzero(self.complete), _SCORING_POINTS)
        if reported is None or not len(scoring):
            return infer_regions(self.chunks, candidates[0][1], candidates[0][0])
        scored = []
        for label, schedule in candidates:
            regions = infer_regions(self.chunks, schedule, label)
            remade = fragmentation_at(self.events, regions, scoring, self.chunks)
            error = np.nanmax(np.abs(remade - reported[scoring]))
            scored.append((error, regions))
            if error < 1e-4:
                break
        return min(scored, key=lambda pair: pair[0])[1]

    def fragmentation_at(self, points: np.ndarray) -> np.ndarray:
        return fragmentation_at(self.events, self.regions, points, self.chunks)
