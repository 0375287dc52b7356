"""Replays buffer lifetimes through a model of the BFC allocator, for traces that
have lifetimes but no allocator view: best fit (smallest free chunk that fits,
lowest address on ties), BFC's 256-byte rounding and split rule, coalescing with
free neighbours, and a pool that grows by BFC's region schedule. The figures it
gives are modeled, and reports say so.

The allocator's steps are written out in one loop rather than as methods: at
millions of events the calls would cost as much as the work. Training loops
repeat: when the model is in the same state at two step starts and the step in
between allocates and frees the same way as the steps after, those steps give the
same results, so they are copied rather than recomputed (exactly, not estimated).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

import numpy as np

from tpumem.analysis.allocators.bfc import (
    MAX_INTERNAL_FRAGMENTATION,
    MIN_ALLOCATION,
    UNLIMITED,
    RegionSchedule,
    fragmentation_ratio,
)
from tpumem.analysis.device_events import pair_events


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """The model's state after each event."""

    in_use: np.ndarray
    pool: np.ndarray
    largest_free: np.ndarray
    address: np.ndarray  # per event: the chunk the model handed out or took back
    change: np.ndarray  # + its size for an allocation, - for a free, 0 if skipped
    copied_events: int = 0  # results copied from an identical earlier step
    # Under a memory limit: the allocation that found no room (out of memory). The
    # arrays then end with the event before it, as the run would.
    failed_at: int | None = None
    source: str = "BFC allocator model"  # which model, in words

    @property
    def chunk_bytes(self) -> np.ndarray:
        sizes: np.ndarray = np.abs(self.change)
        return sizes

    @property
    def fragmentation(self) -> np.ndarray:
        return fragmentation_ratio(self.pool - self.in_use, self.largest_free)


_SEGMENT = 1 << 16  # events turned into Python values at a time
_ADDRESS, _CHANGE, _LARGEST = range(3)


def _partner_offsets(is_alloc: np.ndarray, buffer_id: np.ndarray) -> np.ndarray:
    """Per event: the offset to its partner event (see pair_events); a large
    sentinel where there is none."""
    partner = pair_events(is_alloc, buffer_id)
    return np.where(partner >= 0, partner - np.arange(len(partner)), 1 << 40)


def quiet_points(is_alloc: np.ndarray, most: int) -> np.ndarray:
    """Event indices where the number of live buffers is at a level it never goes
    below again: a training loop's step boundaries, found without step marks. At
    most `most` of them, evenly spread. They are only candidates: replay() copies a
    block only after checking that state and events repeat."""
    live = np.cumsum(is_alloc.astype(np.int8) * np.int8(2) - np.int8(1), dtype=np.int32)
    floor = np.minimum.accumulate(live[::-1])[::-1]
    points = np.flatnonzero(live[:-1] == floor[:-1]) + 1
    if len(points) > most:
        points = points[np.linspace(0, len(points) - 1, most).astype(np.int64)]
    return points


def replay_sizes(requested: np.ndarray, recorded: np.ndarray) -> np.ndarray:
    """What the model asks for per event: the bytes requested where the trace knows
    them (the allocator rounds them itself), else the bytes recorded."""
    return np.where(requested > 0, requested, recorded)


def repeat_candidates(step_starts: np.ndarray, is_alloc: np.ndarray) -> np.ndarray:
    """Where replay() looks for repeated blocks: the step marks' events and the
    quiet points of the lifetimes (only candidates; replay() checks them)."""
    return np.union1d(step_starts, quiet_points(is_alloc, most=len(is_alloc) // 16))


def _same_block(signature: tuple[np.ndarray, ...], a: int, b: int, length: int) -> bool:
    """Whether events [b, b + length) allocate and free as [a, a + length) do:
    equal sizes, kinds and offsets to their partner events. With an equal state at
    their starts, equal blocks give equal results."""
    return all(np.array_equal(c[a : a + length], c[b : b + length]) for c in signature)


def replay(
    is_alloc: np.ndarray,
    requested: np.ndarray,
    buffer_id: np.ndarray,
    memory_limit: int = UNLIMITED,
    allow_growth: bool = True,
    step_starts: np.ndarray | None = None,
) -> ReplayResult:
    """Frees of buffers allocated before the trace began are skipped (the model
    cannot know where they were), as are allocations of 0 bytes (BFC returns null).
    `step_starts` (event indices) lets repeated steps be copied. Under a
    `memory_limit` the replay stops at the first allocation that does not fit."""
    schedule = RegionSchedule(memory_limit, allow_growth)
    free_sorted: list[tuple[int, int]] = []  # (size, start): best-fit order
    free_at: dict[int, int] = {}  # start -> size
    free_ending: dict[int, int] = {}  # end -> start
    used: dict[int, tuple[int, int]] = {}  # buffer -> (start, size)
    next_region = 0
    unit = MIN_ALLOCATION
    n = len(is_alloc)
    # Per event: address, signed chunk size, largest free block. Bytes in use and
    # the pool follow from them and from `grown` (event, pool after it) afterwards.
    results = np.zeros((3, n), dtype=np.int64)
    grown: list[tuple[int, int]] = []
    starts: list[int] = []
    signature = None
    if step_starts is not None and len(step_starts) > 2:
        starts = np.unique(step_starts).tolist()
        signature = (is_alloc, requested, _partner_offsets(is_alloc, buffer_id))
    seen: dict[tuple[object, ...], int] = {}
    copied = 0
    failed = None
    next_start = 0
    i = 0
    while i < n:
        while next_start < len(starts) and starts[next_start] < i:
            next_start += 1
        if signature is not None and next_start < len(starts) and starts[next_start] == i:
            next_start += 1
            key = (
                tuple(free_sorted),
                tuple(sorted(used.values())),
                schedule.pool,
                schedule.current,
                next_region,
            )
            earlier = seen.get(key)
            seen[key] = i
            repeats = 0 if earlier is None else _repeats(signature, earlier, i)
            if earlier is not None and repeats:
                length = i - earlier
                block = results[:, earlier:i]
                results[:, i : i + repeats * length] = np.tile(block, repeats)
                # The block frees all it allocates, so the state is unchanged.
                i += repeats * length
                copied += repeats * length
                continue
        # A segment up to the next step start: plain Python values in a plain loop.
        stop = min(starts[next_start] if next_start < len(starts) else n, i + _SEGMENT)
        out_address: list[int] = []
        out_change: list[int] = []  # + chunk for an allocation, - chunk for a free
        out_largest: list[int] = []
        for alloc, size, buffer in zip(
            is_alloc[i:stop].tolist(),
            requested[i:stop].tolist(),
            buffer_id[i:stop].tolist(),
            strict=True,
        ):
            start = change = 0
            if alloc:
                if size > 0:
                    rounded = (size + unit - 1) // unit * unit
                    index = bisect_left(free_sorted, (rounded, -1))
                    if index == len(free_sorted):
                        if rounded > schedule.available():
                            failed = i + len(out_change)  # out of memory: the run ends
                            break
                        region = schedule.next_region(rounded)
                        grown.append((i + len(out_change), schedule.pool))
                        # A gap after each region keeps two regions from
                        # coalescing, as BFC never merges chunks across regions.
                        insort(free_sorted, (region, next_region))
                        free_at[next_region] = region
                        free_ending[next_region + region] = next_region
                        next_region += region + unit
                        index = bisect_left(free_sorted, (rounded, -1))
                    chunk, start = free_sorted.pop(index)
                    del free_at[start], free_ending[start + chunk]
                    if chunk >= 2 * rounded or chunk - rounded >= MAX_INTERNAL_FRAGMENTATION:
                        rest = start + rounded
                        insort(free_sorted, (chunk - rounded, rest))
                        free_at[rest] = chunk - rounded
                        free_ending[start + chunk] = rest
                        chunk = rounded
                    used[buffer] = (start, chunk)
                    change = chunk
            else:
                found = used.pop(buffer, None)
                if found is not None:
                    start, chunk = found
                    change = -chunk
                    merged_start, merged = start, chunk
                    following = free_at.pop(start + chunk, None)
                    if following is not None:
                        free_sorted.pop(bisect_left(free_sorted, (following, start + chunk)))
                        del free_ending[start + chunk + following]
                        merged += following
                    preceding = free_ending.pop(start, None)
                    if preceding is not None:
                        free_sorted.pop(bisect_left(free_sorted, (start - preceding, preceding)))
                        del free_at[preceding]
                        merged += start - preceding
                        merged_start = preceding
                    insort(free_sorted, (merged, merged_start))
                    free_at[merged_start] = merged
                    free_ending[merged_start + merged] = merged_start
            out_address.append(start)
            out_change.append(change)
            out_largest.append(free_sorted[-1][0] if free_sorted else 0)
        stop = i + len(out_change)
        results[_ADDRESS, i:stop] = out_address
        results[_CHANGE, i:stop] = out_change
        results[_LARGEST, i:stop] = out_largest
        i = stop
        if failed is not None:
            n, results = failed, results[:, :failed]
    pool = np.zeros(n, dtype=np.int64)
    for index, size in grown:
        pool[index] = size
    change = results[_CHANGE]
    return ReplayResult(
        in_use=np.cumsum(change),
        pool=np.maximum.accumulate(pool) if n else pool,
        largest_free=results[_LARGEST],
        address=results[_ADDRESS],
        change=change,
        copied_events=copied,
        failed_at=failed,
    )


def _repeats(signature: tuple[np.ndarray, ...], earlier: int, here: int) -> int:
    """How many blocks like [earlier, here) follow `here`, when that block is
    self-contained: every buffer it frees it allocated, and it frees all it
    allocates; only then do equal offsets mean equal buffers."""
    length = here - earlier
    partner = np.arange(earlier, here) + signature[2][earlier:here]
    if not ((partner >= earlier) & (partner < here)).all():
        return 0
    n = len(signature[0])
    repeats = 0
    while here + (repeats + 1) * length <= n and _same_block(
        signature, earlier, here + repeats * length, length
    ):
        repeats += 1
    return repeats
