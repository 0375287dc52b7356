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

from tpumem.analysis.bins import bin_of, highest_of_bins
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
    # Bytes in use that no live buffer the trace saw accounts for (made unseen,
    # reserved outside the heap): in_use - live_bytes, as at the peak.
    unattributed: tuple[int, ...]
    # Per moment, (group, bytes, buffers) of its largest groups, largest first
    # (equal bytes: in the groups' order), at most MOMENT_GROUPS.
    top: tuple[tuple[tuple[int, int, int], ...], ...]
    peak: int  # the moment that is the peak (peak.py's event)


def moment_indices(events: DeviceEvents, bins: int = MOMENT_BINS) -> np.ndarray:
    """The events the moments are taken at, in order."""
    if not len(events):
        return np.zeros(0, np.int64)
    if len(events) <= bins:
        return np.arange(len(events))
    chosen, starts = highest_of_bins(bin_of(events.time_ns, bins), events.in_use)
    # Each stretch's last event too: its live set holds until the next stretch's
    # first event, so a click in a quiet time is answered exactly.
    return np.union1d(chosen, np.append(starts[1:], len(events)) - 1)


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
        unattributed=tuple(np.maximum(in_use - live_bytes, 0).tolist()),
        top=tuple(top),
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
    each (MOMENT_GROUPS, m), largest first; buffers 0 where a moment has fewer."""
    k = MOMENT_GROUPS
    best_ids = np.full((k, m), groups, np.int64)  # `groups`: no group
    best_bytes = np.full((k, m), -1, np.int64)
    best_count = np.zeros((k, m), np.int64)
    if not len(ids) or not m:
        return best_ids, best_bytes, best_count
    order = np.argsort(ids, kind="stable")
    ids, first, after, sizes = ids[order], first[order], after[order], sizes[order]
    block = max(1, _CELLS // (m + 1))
    bounds = np.searchsorted(ids, np.arange(0, groups + block, block))
    for lo in range(0, groups, block):
        part = slice(bounds[lo // block], bounds[lo // block + 1])
        rows = min(block, groups - lo)
        cell_first = (ids[part] - lo) * (m + 1) + first[part]
        cell_after = (ids[part] - lo) * (m + 1) + after[part]
        cells = rows * (m + 1)
        table = _changes(cell_first, cell_after, sizes[part], cells)
        counts = np.bincount(cell_first, minlength=cells) - np.bincount(cell_after, minlength=cells)
        table = np.cumsum(table.reshape(rows, m + 1), axis=1)[:, :m]
        counts = np.cumsum(counts.reshape(rows, m + 1), axis=1)[:, :m]
        table[counts == 0] = -1  # a group with no buffer live there is not shown
        # Stable sorts keep equal bytes in the groups' order: earlier blocks first.
        all_bytes = np.concatenate([best_bytes, table])
        all_ids = np.concatenate([best_ids, np.arange(lo, lo + rows)[:, None].repeat(m, axis=1)])
        all_count = np.concatenate([best_count, counts])
        pick = np.argsort(-all_bytes, axis=0, kind="stable")[:k]
        best_bytes = np.take_along_axis(all_bytes, pick, axis=0)
        best_ids = np.take_along_axis(all_ids, pick, axis=0)
        best_count = np.take_along_axis(all_count, pick, axis=0)
    return best_ids, best_bytes, best_count
