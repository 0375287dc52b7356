"""Time bins for drawing and summing up a run: which bin an event falls in, and the
largest value of each bin, so that no spike (the peak least of all) falls between
two points. The timeline of a report and the series of a page both use them."""

from __future__ import annotations

import numpy as np


def bin_of(time_ns: np.ndarray, count: int) -> np.ndarray:
    """The bin of each event, `count` equal bins from the first event to the last."""
    start = int(time_ns[0])
    span = max(1, int(time_ns[-1]) - start)
    bins: np.ndarray = np.minimum(((time_ns - start) * count) // span, count - 1)
    return bins.astype(np.int64)


def bin_max(bins: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    """The largest value in each bin (NaN values ignored); NaN where a bin has none."""
    out = np.full(count, np.nan)
    values = values.astype(np.float64)
    known = ~np.isnan(values)
    np.fmax.at(out, bins[known], values[known])
    return out


def highest_of_bins(bins: np.ndarray, in_use: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the index of each non-empty bin's highest event, the first of equal ones;
    the index each non-empty bin starts at), for `bins` in order."""
    starts = np.flatnonzero(np.diff(bins, prepend=-1))
    highest = np.maximum.reduceat(in_use, starts)
    hits = np.flatnonzero(in_use == np.repeat(highest, np.diff(np.append(starts, len(bins)))))
    # (the events at their bin's highest are few: their bins are found among them)
    owner = np.searchsorted(starts, hits, side="right") - 1
    _, first = np.unique(owner, return_index=True)
    return hits[first], starts


def highest_and_last_of_bins(bins: np.ndarray, in_use: np.ndarray) -> np.ndarray:
    """Each non-empty bin's highest event and its last, in order: the highest keep
    every spike, and the last what stays in use until the next bin's first event."""
    highest, starts = highest_of_bins(bins, in_use)
    return np.union1d(highest, np.append(starts[1:], len(bins)) - 1)
