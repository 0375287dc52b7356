"""Bytes in use and fragmentation over time, binned for drawing: the maximum of
each bin, so no spike (the peak least of all) falls between two points."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Timeline:
    start_ns: int
    end_ns: int
    in_use_max: tuple[int, ...]  # per bin; the last value carried where a bin is empty
    fragmentation_max: tuple[float | None, ...]


def _binned_max(bins: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    out = np.full(count, np.nan)
    known = ~np.isnan(values)
    np.fmax.at(out, bins[known], values[known])
    return out


def timeline(
    time_ns: np.ndarray, in_use: np.ndarray, fragmentation: np.ndarray, bins: int = 64
) -> Timeline:
    if not len(time_ns):
        return Timeline(0, 0, (), ())
    start, end = int(time_ns[0]), int(time_ns[-1])
    span = max(1, end - start)
    index = np.minimum(((time_ns - start) * bins) // span, bins - 1).astype(np.int64)
    use = _binned_max(index, in_use.astype(np.float64), bins)
    # A bin with no event holds what the last earlier event left in use.
    last_event = np.full(bins, -1, dtype=np.int64)
    np.maximum.at(last_event, index, np.arange(len(index)))
    carried = np.maximum.accumulate(last_event)
    empty = np.isnan(use)
    use[empty] = in_use[np.maximum(carried[empty], 0)]
    frag = _binned_max(index, fragmentation.astype(np.float64), bins)
    return Timeline(
        start,
        end,
        tuple(int(v) for v in use),
        tuple(None if np.isnan(v) else round(float(v), 6) for v in frag),
    )
