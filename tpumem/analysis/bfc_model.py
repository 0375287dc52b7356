"""Replays buffer lifetimes through a model of the BFC allocator, for traces that
have lifetimes but no allocator view: best fit (smallest free chunk that fits,
lowest address on ties), BFC's 256-byte rounding and split rule, coalescing with
free neighbours, and a pool that grows by BFC's region schedule. The figures it
gives are modeled, and reports say so."""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

import numpy as np

from tpumem.analysis.bfc import (
    MIN_ALLOCATION,
    UNLIMITED,
    RegionSchedule,
    fragmentation_ratio,
    rounded_bytes,
    splits,
)


class BfcReplay:
    """One simulated BFC allocator."""

    def __init__(self, memory_limit: int = UNLIMITED, allow_growth: bool = True) -> None:
        self.schedule = RegionSchedule(memory_limit, allow_growth)
        self._free_sorted: list[tuple[int, int]] = []  # (size, start): best fit order
        self._free_at: dict[int, int] = {}  # start -> size
        self._free_ending: dict[int, int] = {}  # end -> start
        self._used: dict[int, tuple[int, int]] = {}  # buffer -> (start, size)
        self._next_region = 0
        self.in_use = 0

    @property
    def pool(self) -> int:
        return self.schedule.pool

    @property
    def largest_free(self) -> int:
        return self._free_sorted[-1][0] if self._free_sorted else 0

    def _insert(self, start: int, size: int) -> None:
        insort(self._free_sorted, (size, start))
        self._free_at[start] = size
        self._free_ending[start + size] = start

    def _remove(self, start: int, size: int) -> None:
        del self._free_sorted[bisect_left(self._free_sorted, (size, start))]
        del self._free_at[start]
        del self._free_ending[start + size]

    def allocate(self, buffer: int, requested: int) -> tuple[int, int]:
        """Returns (address, chunk bytes)."""
        rounded = rounded_bytes(requested)
        index = bisect_left(self._free_sorted, (rounded, -1))
        if index == len(self._free_sorted):
            size = self.schedule.next_region(rounded)
            # A gap after each region keeps chunks of two regions from coalescing,
            # as BFC never merges across regions.
            self._insert(self._next_region, size)
            self._next_region += size + MIN_ALLOCATION
            index = bisect_left(self._free_sorted, (rounded, -1))
        size, start = self._free_sorted[index]
        self._remove(start, size)
        if splits(size, rounded):
            self._insert(start + rounded, size - rounded)
            size = rounded
        self._used[buffer] = (start, size)
        self.in_use += size
        return start, size

    def free(self, buffer: int) -> bool:
        """Frees a buffer; False when the model never saw it allocated."""
        found = self._used.pop(buffer, None)
        if found is None:
            return False
        start, size = found
        self.in_use -= size
        following = self._free_at.get(start + size)
        if following is not None:
            self._remove(start + size, following)
            size += following
        preceding = self._free_ending.get(start)
        if preceding is not None:
            self._remove(preceding, start - preceding)
            size += start - preceding
            start = preceding
        self._insert(start, size)
        return True


@dataclass(frozen=True, slots=True)
class ReplayResult:
    in_use: np.ndarray
    pool: np.ndarray
    largest_free: np.ndarray
    chunk_bytes: np.ndarray  # per event: the chunk the model handed out or took back

    @property
    def fragmentation(self) -> np.ndarray:
        return fragmentation_ratio(self.pool - self.in_use, self.largest_free)


def replay(
    is_alloc: np.ndarray,
    requested: np.ndarray,
    buffer_id: np.ndarray,
    memory_limit: int = UNLIMITED,
    allow_growth: bool = True,
) -> ReplayResult:
    """The model's state after each event. Frees of buffers allocated before the
    trace began are skipped (the model cannot know where they were)."""
    model = BfcReplay(memory_limit, allow_growth)
    n = len(is_alloc)
    in_use = np.empty(n, dtype=np.int64)
    pool = np.empty(n, dtype=np.int64)
    largest = np.empty(n, dtype=np.int64)
    chunk = np.zeros(n, dtype=np.int64)
    sizes: dict[int, int] = {}
    for i, (alloc, size, buffer) in enumerate(
        zip(is_alloc.tolist(), requested.tolist(), buffer_id.tolist(), strict=True)
    ):
        if alloc:
            if size > 0:
                chunk[i] = sizes[buffer] = model.allocate(buffer, size)[1]
        elif model.free(buffer):
            chunk[i] = sizes.pop(buffer)
        in_use[i] = model.in_use
        pool[i] = model.pool
        largest[i] = model.largest_free
    return ReplayResult(in_use, pool, largest, chunk)
