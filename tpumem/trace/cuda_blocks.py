"""PyTorch's CUDA caching allocator: the size of the block it hands out for a
request (c10/cuda/CUDACachingAllocator.cpp, `round_size`). One rule, read by the
snapshot import (a snapshot's `alloc` entries carry the size asked for) and by
the analysis of its out-of-memory entries.

Every request is rounded up to a multiple of 512 bytes (kMinBlockSize). With
`roundup_power2_divisions` set for a size's power-of-two interval (from 1 MiB
up), a request above 512 x divisions is rounded up to the next of that many equal
steps between two powers of two. Replayed so, the recorded snapshots' allocations
give `torch.cuda.max_memory_allocated()` byte for byte (docs/frameworks.md).
A block can still be larger than this: a free block too small to split is handed
out whole; the snapshot's segments show such blocks as they are at its end.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

MIN_BLOCK = 512
# roundup_power2_divisions has 16 intervals: [1 MiB, 2 MiB), [2, 4), ... the last
# open-ended; the snapshot keys them "1", "2", "4", ... "32768".
_FIRST_INTERVAL = 1 << 20
_INTERVALS = 16


def divisions_by_interval(setting: object) -> np.ndarray:
    """The snapshot's `roundup_power2_divisions` (a dict of 16) as an array;
    zeros (no rounding beyond 512) for anything else."""
    result = np.zeros(_INTERVALS, np.int64)
    if isinstance(setting, Mapping):
        for index in range(_INTERVALS):
            value = setting.get(str(1 << index))
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 1 << 20:
                result[index] = value
    return result


def block_size(requested: int) -> int:
    """One request's block under the default settings (no divisions): as
    `block_sizes` rounds, for a caller with one size at a time."""
    return max(-(-requested // MIN_BLOCK) * MIN_BLOCK, MIN_BLOCK)


def block_sizes(requested: np.ndarray, divisions: np.ndarray | None = None) -> np.ndarray:
    """The block each request gets, as the allocator rounds it."""
    size = np.maximum(requested.astype(np.int64), 0)
    rounded: np.ndarray = np.maximum((size + MIN_BLOCK - 1) // MIN_BLOCK * MIN_BLOCK, MIN_BLOCK)
    if divisions is None or not divisions.any():
        return rounded
    log = np.floor(np.log2(np.maximum(size, 1))).astype(np.int64)
    # (PyTorch's index is a size_t: below 1 MiB it wraps, and is clamped to the
    # last interval, not the first)
    interval = np.where(log < 20, _INTERVALS - 1, np.minimum(log - 20, _INTERVALS - 1))
    parts = divisions[interval]
    use = (parts > 1) & (size > MIN_BLOCK * parts)
    floor = np.left_shift(np.int64(1), np.clip(log, 0, 62))
    step = floor // np.left_shift(
        np.int64(1), np.floor(np.log2(np.maximum(parts, 1))).astype(np.int64)
    )
    power = size == floor
    step_safe = np.maximum(step, 1)
    next_division = np.where(
        step == 0,
        floor * 2,
        np.where(size % step_safe == 0, size, size - size % step_safe + step_safe),
    )
    return np.where(use, np.where(power, size, next_division), rounded)
