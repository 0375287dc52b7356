"""What was live at moments of a run, so that a page can answer "what was live
here?" anywhere on its timeline: at each chosen event, the buffers live just after
it, grouped as the peak's are (peak.GROUP_KEYS), largest first; the first
MOMENT_GROUPS groups named, the rest summed.

The moments are the highest and the last event of each of MOMENT_BINS stretches
of the run (bins.py), the peak among them: a click lands near the top of the
stretch it points at, and in a quiet time between stretches on the live set that
holds there. A trace of fewer events has every event as a moment.

One sweep serves all moments. An allocation is live at the moments from its own
event up to its end (DeviceEvents.ends, the one rule for liveness), a contiguous
run of moments; per group those runs add up through a difference array, a block
of groups at a time, so memory stays bounded however many groups a trace has.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis.allocators.bins import bin_of, highest_and_last_of_bins
from tpumem.analysis.device_events import DeviceEvents
from tpumem.analysis.peak import GROUP_KEYS
from tpumem.trace.model import Trace

MOMENT_BINS = 4000  # stretches of the run whose highest and last events are moments
MOMENT_GROUPS = 10  # groups named per moment; the rest summed
_CELLS = 1 << 22  # cells of one block of the (group x moment) table
_HALF = 26  # bits: sizes (at most 2^50, trace/values.py) are summed in two halves


@dataclass(frozen=True, slots=True)
class Moments:
    # (op, region, dtype, shape, source) of every group some moment names.
    groups: tuple[tuple[str | None, ...], ...]
    event_index: tuple[int, ...]
    time_ns: tuple[int, ...]
    # Until when nothing changed: the next event's time (None after the last), so
    # a moment stands exactly for any time from its own up to then.
    until_ns: tuple[int | None, ...]
    in_use: tuple[int, ...]  # the line's figure at the moment (heap + reserved)
    live_bytes: tuple[int, ...]  # of the buffers the trace saw made and live
    live_buffers: tuple[int, ...]
    stack: tuple[int, ...]  # reserved outside the heap (a TPU program's stack), as at the peak
    # Bytes in the heap that no live buffer the trace saw accounts for (made
    # unseen): in_use - stack - live_bytes, as peak.py counts it.
    unattributed: tuple[int, ...]
    # Per moment, (group, bytes, buffers) of its largest groups, largest first
    # (equal bytes: in the groups' order), at most MOMENT_GROUPS; and the rest's.
    top: tuple[tuple[tuple[int, int, int], ...], ...]
    rest_bytes: tuple[int, ...]
    rest_buffers: tuple[int, ...]
    peak: int  # the moment that is the peak (peak.py's event)


def moment_indices(events: DeviceEvents, bins: int = MOMENT_BINS) -> np.ndarray:
    """The events the moments are taken at, in order."""
    if not len(events):
        return np.zeros(0, np.int64)
    if len(events) <= bins:
        return np.arange(len(events))
    # (The last of each: its live set holds until the next stretch's first event,
    # so a click in a quiet time is answered exactly.)
    return highest_and_last_of_bins(bin_of(events.time_ns, bins), events.in_use)


def _group_ids(
    trace: Trace, events: DeviceEvents, allocs: np.ndarray
) -> tuple[np.ndarray, tuple[tuple[str | None, ...], ...]]:
    """Per allocation, its group's rank in the order of the group's codes (the
    order peak.live_groups breaks ties in), and each group's key."""
    rows = events.row[allocs]
    columns = [trace.codes_at(key, rows) for key in GROUP_KEYS]
    # Column by column, re-ranked each time: ranks keep the codes' order and stay
    # below the number of allocations, so no product of many codes overflows.
    ids = np.zeros(len(allocs), np.int64)
    for codes, values in columns:
        ids = np.unique(ids * (len(values) + 1) + codes.astype(np.int64) + 1, return_inverse=True)[
            1
        ].ravel()
    count = int(ids.max()) + 1 if len(ids) else 0
    first = np.full(count, -1, np.int64)
    first[ids[::-1]] = np.arange(len(ids))[::-1]
    keys = tuple(
        tuple(values[codes[i]] if codes[i] >= 0 else None for codes, values in columns)
        for i in first.tolist()
    )
    return ids, keys


def moments(trace: Trace, events: DeviceEvents, indices: np.ndarray) -> Moments:
    """The live set after each event in `indices` (sorted), grouped."""
    m = len(indices)
    allocs = np.flatnonzero(events.is_alloc)
    first = np.searchsorted(indices, allocs, side="left")
    after = np.searchsorted(indices, events.ends()[allocs], side="left")
    live = after > first
    allocs, first, after = allocs[live], first[live], after[live]
    sizes = events.bytes[allocs].astype(np.int64)
    live_bytes = _running(first, after, sizes, m)
    live_buffers = _running(first, after, np.ones(len(allocs), np.int64), m)
    ids, keys = _group_ids(trace, events, allocs)
    top_ids, top_bytes, top_count = _largest(ids, len(keys), first, after, sizes, m)
    named = np.unique(top_ids[top_count > 0])
    rename = np.full(len(keys) + 1, -1, np.int64)
    rename[named] = np.arange(len(named))
    in_use = events.in_use[indices].astype(np.int64)
    stack = np.zeros(m, np.int64) if events.reserved is None else events.reserved[indices]
    shown_bytes = np.where(top_count > 0, top_bytes, 0).sum(axis=0)
    top = []
    for j in range(m):
        shown = top_count[:, j] > 0
        top.append(
            tuple(
                zip(
                    rename[top_ids[shown, j]].tolist(),
                    top_bytes[shown, j].tolist(),
                    top_count[shown, j].tolist(),
                    strict=True,
                )
            )
        )
    return Moments(
        groups=tuple(keys[g] for g in named.tolist()),
        event_index=tuple(indices.tolist()),
        time_ns=tuple(events.time_ns[indices].tolist()),
        until_ns=tuple(
            int(events.time_ns[i + 1]) if i + 1 < len(events) else None for i in indices.tolist()
        ),
        in_use=tuple(in_use.tolist()),
        live_bytes=tuple(live_bytes.tolist()),
        live_buffers=tuple(live_buffers.tolist()),
        stack=tuple(stack.tolist()),
        unattributed=tuple(np.maximum(in_use - stack - live_bytes, 0).tolist()),
        top=tuple(top),
        rest_bytes=tuple((live_bytes - shown_bytes).tolist()),
        rest_buffers=tuple((live_buffers - top_count.sum(axis=0)).tolist()),
        peak=int(np.searchsorted(indices, int(np.argmax(events.in_use)))) if m else -1,
    )


def _running(first: np.ndarray, after: np.ndarray, values: np.ndarray, m: int) -> np.ndarray:
    """Per moment, the sum of `values` of the allocations live there. (In integers:
    a float's 53 bits do not hold a sum of sizes up to 2^50 each.)"""
    return np.cumsum(_changes(first, after, values, m + 1))[:m]


def _changes(first: np.ndarray, after: np.ndarray, values: np.ndarray, cells: int) -> np.ndarray:
    """A difference array: `values` added at `first`, taken away at `after`. Summed
    by bincount (np.add.at is ten times slower) in two halves of 26 bits, each of
    whose sums a float holds exactly."""
    delta = np.zeros(cells, np.int64)
    for part, scale in ((values >> _HALF, 1 << _HALF), (values & ((1 << _HALF) - 1), 1)):
        weights = part.astype(np.float64)
        summed = np.bincount(first, weights, cells) - np.bincount(after, weights, cells)
        delta += np.rint(summed).astype(np.int64) * scale
    return delta


def _largest(
    ids: np.ndarray, groups: int, first: np.ndarray, after: np.ndarray, sizes: np.ndarray, m: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group, bytes, buffers) of the MOMENT_GROUPS largest groups at each moment,
    each (MOMENT_GROUPS, m), largest first (equal bytes: the lower group first);
    buffers 0 where a moment has fewer.

    Each group is summed only over the stretches of moments where one of its
    buffers is live (its buffers' spans joined where they touch, a cell a moment
    and one past the end): the work is what was live, not groups times moments,
    so a trace of many short-lived groups (a shape per batch) costs what it holds."""
    k = MOMENT_GROUPS
    best_ids = np.full((k, m), groups, np.int64)  # `groups`: no group
    best_bytes = np.full((k, m), -1, np.int64)
    best_count = np.zeros((k, m), np.int64)
    if not len(ids) or not m:
        return best_ids, best_bytes, best_count
    order = np.lexsort((first, ids))
    ids, first, after, sizes = ids[order], first[order], after[order], sizes[order]
    # A group's stretches: a new one where a buffer starts after every earlier
    # buffer of the group has ended (the keys keep groups apart in one running max).
    reach = np.maximum.accumulate(ids * (m + 2) + after) - ids * (m + 2)
    new = np.ones(len(ids), bool)
    new[1:] = (ids[1:] != ids[:-1]) | (first[1:] > reach[:-1])
    starts = np.flatnonzero(new)
    present = ids[starts]  # each stretch's group
    span_lo = first[starts]
    span_cells = np.maximum.reduceat(after, starts) - span_lo + 1
    # Blocks of groups of at most _CELLS cells (a group longer than that, alone).
    ends = np.cumsum(span_cells)
    candidates = []
    lo_group = 0
    while lo_group < len(present):
        base = ends[lo_group - 1] if lo_group else 0
        hi_group = max(lo_group + 1, int(np.searchsorted(ends, base + _CELLS, side="right")))
        candidates.append(
            _block_candidates(
                ids, first, after, sizes, starts, present, span_lo, span_cells, lo_group, hi_group
            )
        )
        lo_group = hi_group
    j, g, v, c = (np.concatenate(parts) for parts in zip(*candidates, strict=True))
    # The first k of each moment, by bytes, then the group's order.
    order = np.lexsort((g, -v, j))
    j, g, v, c = j[order], g[order], v[order], c[order]
    rank = np.arange(len(j)) - np.searchsorted(j, j, side="left")
    kept = rank < k
    best_ids[rank[kept], j[kept]] = g[kept]
    best_bytes[rank[kept], j[kept]] = v[kept]
    best_count[rank[kept], j[kept]] = c[kept]
    return best_ids, best_bytes, best_count


def _block_candidates(
    ids: np.ndarray,
    first: np.ndarray,
    after: np.ndarray,
    sizes: np.ndarray,
    starts: np.ndarray,
    present: np.ndarray,
    span_lo: np.ndarray,
    span_cells: np.ndarray,
    lo_group: int,
    hi_group: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(moment, group, bytes, buffers) of each group of the block at each moment
    of its span where a buffer of it is live: at most MOMENT_GROUPS per moment."""
    rows = slice(starts[lo_group], starts[hi_group] if hi_group < len(starts) else len(ids))
    cells = span_cells[lo_group:hi_group]
    offset = np.concatenate([[0], np.cumsum(cells)[:-1]])
    # Where each group's cells start, for each allocation of the block.
    local = np.repeat(
        np.arange(hi_group - lo_group), np.diff(np.append(starts[lo_group:hi_group], rows.stop))
    )
    base = offset[local] - span_lo[lo_group + local]
    cell_first, cell_after = base + first[rows], base + after[rows]
    total = int(cells.sum())
    # (Each group's changes add up to nothing over its cells: one cumsum serves all.)
    value = np.cumsum(_changes(cell_first, cell_after, sizes[rows], total))
    count = np.cumsum(
        np.bincount(cell_first, minlength=total) - np.bincount(cell_after, minlength=total)
    )
    live = np.flatnonzero(count > 0)
    owner = np.searchsorted(offset, live, side="right") - 1
    j = span_lo[lo_group + owner] + (live - offset[owner])
    g, v, c = present[lo_group + owner], value[live], count[live]
    order = np.lexsort((g, -v, j))
    j, g, v, c = j[order], g[order], v[order], c[order]
    kept = np.arange(len(j)) - np.searchsorted(j, j, side="left") < MOMENT_GROUPS
    return j[kept], g[kept], v[kept], c[kept]
