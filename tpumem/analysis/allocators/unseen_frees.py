"""When a buffer whose free the capture did not see stopped being live: the one
rule that the peak, the series, the address map and the capacity replay read.

A capture made of profiler sessions back to back (TensorFlow; JAX on GPU) sees
nothing between two sessions, so an allocation seen in one session may be freed
unseen in the gap after it. Most such buffers are not freed at all: a model's
weights and its optimizer's state are made once and live to the end, and ending
them at the first gap dropped them from what was live at the peak (a Keras
`fit()` showed half its peak "allocated unseen"). So a buffer whose free went
unseen lives on until the trace shows it gone:

- its address range is used again: a later allocation overlaps it (BFC reuses a
  freed chunk whole, split or coalesced), or a free of a buffer allocated unseen
  does (that one was made in a gap). The profiler sees every free within a
  session, so the buffer was freed in the gap before the session that reuses its
  range: it ends at that session's first event. (Within its own session, a later
  event at its address ends it there: the profiler lost its free.)
- or, where the allocator reported its own bytes in use, keeping it would make
  the buffers the trace names add up to more than the allocator had: one of the
  doubtful buffers was freed by then and the trace cannot say which, so all of
  them end there and their bytes count as allocated unseen rather than under a
  name they may no longer hold.

Without addresses (no range to see reused) the old rule stands: freed in the
first gap after it. The cost is linear in the events, plus the buffers still in
doubt at each gap.
"""

from __future__ import annotations

import numpy as np


def allocation_ends(
    is_alloc: np.ndarray,
    partner: np.ndarray,
    size: np.ndarray,
    address: np.ndarray,
    resumed: np.ndarray,
    heap: np.ndarray | None,
) -> np.ndarray:
    """Per event: for an allocation, the index of the event from which its buffer
    is no longer live (its free; by the rule above where the free went unseen;
    len(is_alloc) when it lives to the end); -1 for a free. `partner` pairs the
    events (device_events.pair_events), `resumed` holds the index of the first
    event after each capture gap, `heap` the allocator's own bytes in use after
    each event (None where the trace has only its events)."""
    count = len(is_alloc)
    end = np.where(is_alloc, np.where(partner >= 0, partner, count), -1)
    unseen = np.flatnonzero(is_alloc & (partner < 0))
    if not len(unseen):
        return end
    if not (address >= 0).all():
        if len(resumed):
            end[unseen] = np.append(resumed, count)[np.searchsorted(resumed, unseen, side="right")]
        return end
    # Within one session an event at the same address shows it gone (events the
    # profiler lost); across a gap the sweep below finds the first reuse.
    following = neighbours_at_address(address)[1][unseen]
    same = np.searchsorted(resumed, unseen, side="right") == np.searchsorted(
        resumed, following, side="right"
    )
    end[unseen[same]] = following[same]
    if len(resumed):
        _Sweep(end, is_alloc, partner, size, address, heap).run(resumed)
    return end


def neighbours_at_address(address: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per event, the index of the previous event at the same address (-1 if
    none) and of the next one (len(address) if none)."""
    count = len(address)
    order = np.lexsort((np.arange(count), address))
    same = address[order][1:] == address[order][:-1]
    previous = np.full(count, -1, dtype=np.int64)
    following = np.full(count, count, dtype=np.int64)
    previous[order[1:][same]] = order[:-1][same]
    following[order[:-1][same]] = order[1:][same]
    return previous, following


class _Sweep:
    """Walks the capture's segments (the stretches between gaps) in order, with
    the doubtful buffers: those whose free went unseen, made before the last gap,
    not yet shown gone. They are held sorted by address; live buffers do not
    overlap, so their ends are sorted too and one binary search finds the ones a
    range meets."""

    def __init__(
        self,
        end: np.ndarray,
        is_alloc: np.ndarray,
        partner: np.ndarray,
        size: np.ndarray,
        address: np.ndarray,
        heap: np.ndarray | None,
    ) -> None:
        self.end, self.size, self.address, self.heap = end, size, address, heap
        self.count = len(end)
        self.allocs = np.flatnonzero(is_alloc)
        self.orphans = np.flatnonzero(~is_alloc & (partner < 0))  # allocated unseen
        # Bytes the named buffers add and remove at each event, as the ends stand.
        self.change = np.zeros(self.count + 1, dtype=np.int64)
        np.add.at(self.change, self.allocs, size[self.allocs])
        np.add.at(self.change, end[self.allocs], -size[self.allocs])
        self.doubtful = np.zeros(0, dtype=np.int64)

    def run(self, resumed: np.ndarray) -> None:
        bounds = np.concatenate([[0], resumed, [self.count]]).astype(np.int64)
        unseen = np.flatnonzero(self.end == self.count)  # allocations live to the end
        joined = np.searchsorted(unseen, bounds)
        live_before = 0  # bytes the named buffers hold before the segment
        for segment in range(len(bounds) - 1):
            lo, hi = int(bounds[segment]), int(bounds[segment + 1])
            if segment:
                fresh = unseen[joined[segment - 1] : joined[segment]]
                self._join(fresh[self.end[fresh] == self.count])
            if lo >= hi:
                continue
            if len(self.doubtful):
                self._reused(lo, hi)
            if self.heap is not None and len(self.doubtful):
                self._bounded(lo, hi, live_before, self.heap)
            live_before += int(self.change[lo:hi].sum())

    def _join(self, fresh: np.ndarray) -> None:
        if len(fresh):
            merged = np.concatenate([self.doubtful, fresh])
            self.doubtful = merged[np.argsort(self.address[merged], kind="stable")]

    def _finish(self, buffers: np.ndarray, at: np.ndarray) -> None:
        self.end[buffers] = at
        np.add.at(self.change, at, -self.size[buffers])
        self.change[self.count] += int(self.size[buffers].sum())

    def _reused(self, lo: int, hi: int) -> None:
        """End the doubtful buffers whose range the segment uses again. The
        profiler sees every free within a session, so such a buffer was freed in
        the gap before the segment: it ends at the segment's first event."""
        users = np.concatenate([_within(self.orphans, lo, hi), _within(self.allocs, lo, hi)])
        start = self.address[self.doubtful]
        stop = start + self.size[self.doubtful]
        first = np.searchsorted(stop, self.address[users], side="right")
        last = np.searchsorted(start, self.address[users] + self.size[users], side="left")
        hit = last > first
        if not hit.any():
            return
        cover = np.zeros(len(self.doubtful) + 1, dtype=np.int64)
        np.add.at(cover, first[hit], 1)
        np.add.at(cover, last[hit], -1)
        met = np.cumsum(cover)[:-1] > 0
        self._finish(self.doubtful[met], np.full(int(met.sum()), lo))
        self.doubtful = self.doubtful[~met]

    def _bounded(self, lo: int, hi: int, live_before: int, heap: np.ndarray) -> None:
        """End every doubtful buffer at the first event of the segment where the
        named buffers would hold more than the allocator had in use."""
        named = live_before + np.cumsum(self.change[lo:hi])
        over = np.flatnonzero(named > heap[lo:hi])
        if len(over):
            self._finish(self.doubtful, np.full(len(self.doubtful), lo + int(over[0])))
            self.doubtful = self.doubtful[:0]


def _within(indices: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The sorted `indices` in [lo, hi)."""
    return indices[np.searchsorted(indices, lo) : np.searchsorted(indices, hi)]
