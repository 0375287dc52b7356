"""The BFC allocator's rules (TSL's bfc_allocator.cc), shared by the replay model
and the address-map reconstruction, and the one fragmentation formula."""

from __future__ import annotations

import numpy as np

MIN_ALLOCATION = 256  # kMinAllocationSize: every chunk is a multiple of it
MAX_INTERNAL_FRAGMENTATION = 128 << 20  # a chunk larger by this much is always split
INITIAL_GROWTH_REGION = 2 << 20  # first region with allow_growth
UNLIMITED = 1 << 62


def rounded_bytes(requested: int) -> int:
    return max(MIN_ALLOCATION, -(-requested // MIN_ALLOCATION) * MIN_ALLOCATION)


class RegionSchedule:
    """The sizes BFC asks its sub-allocator for when it runs out of space: with
    allow_growth regions double from 2 MiB; without, the first region is the limit."""

    def __init__(
        self,
        memory_limit: int = UNLIMITED,
        allow_growth: bool = True,
        initial_region: int = INITIAL_GROWTH_REGION,
    ) -> None:
        self.limit = memory_limit
        self.pool = 0
        self.current = rounded_bytes(
            min(memory_limit, initial_region) if allow_growth else memory_limit
        )

    def available(self) -> int:
        """What the limit leaves for new regions. BFC's Extend refuses a request
        larger than this, and the allocation fails: out of memory."""
        return (self.limit - self.pool) // MIN_ALLOCATION * MIN_ALLOCATION

    def next_region(self, rounded: int) -> int:
        available = self.available()
        increased = False
        while rounded > self.current:
            self.current *= 2
            increased = True
        size = max(min(self.current, available), rounded)
        if not increased:
            self.current *= 2
        self.pool += size
        return size


def fragmentation_ratio(free: np.ndarray | float, largest_free: np.ndarray | float) -> np.ndarray:
    """BFC's external fragmentation: the share of free bytes outside the largest
    free block; 0 when nothing is free. free = pool - bytes in use."""
    free = np.asarray(free, dtype=np.float64)
    largest = np.asarray(largest_free, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(free > 0, (free - largest) / free, 0.0)
    return np.clip(ratio, 0.0, 1.0)
