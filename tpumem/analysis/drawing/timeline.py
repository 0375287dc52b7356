"""Bytes in use and fragmentation over time in the report: the maximum of each of
64 bins (analysis/allocators/bins.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis.allocators.bins import bin_max, bin_of


@dataclass(frozen=True, slots=True)
class Timeline:
    start_ns: int
    end_ns: int
    in_use_max: tuple[int, ...]  # per bin; the last value carried where a bin is empty
    fragmentation_max: tuple[float | None, ...]


def timeline(
    time_ns: np.ndarray, in_use: np.ndarray, fragmentation: np.ndarray, bins: int = 64
) -> Timeline:
    if not len(time_ns):
        return Timeline(0, 0, (), ())
    start, end = int(time_ns[0]), int(time_ns[-1])
    index = bin_of(time_ns, bins)
    use = bin_max(index, in_use, bins)
    # A bin with no event holds what the last earlier event left in use.
    last_event = np.full(bins, -1, dtype=np.int64)
    np.maximum.at(last_event, index, np.arange(len(index)))
    carried = np.maximum.accumulate(last_event)
    empty = np.isnan(use)
    use[empty] = in_use[np.maximum(carried[empty], 0)]
    frag = bin_max(index, fragmentation, bins)
    return Timeline(
        start,
        end,
        tuple(int(v) for v in use),
        tuple(None if np.isnan(v) else round(float(v), 6) for v in frag),
    )
