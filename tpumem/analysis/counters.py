"""The allocator's own counters for a device: sampled bytes in use and the
running peak that allocators report (TF's get_memory_info, JAX's memory_stats).

They hold between events too, so they show a peak that the events missed: one
reached before the capture began or between two of its profiler sessions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.trace.model import Trace
from tpumem.trace.schema import SAMPLE


@dataclass(frozen=True, slots=True)
class Counters:
    samples: int  # counter readings taken between events
    reported_peak_bytes: int | None  # the largest running peak the allocator reported
    sampled_peak_bytes: int | None  # the largest sampled bytes in use
    pool_bytes: int | None = None  # the largest pool the allocator reported holding
    limit_bytes: int | None = None  # the largest limit it reported

    def peak_missed_by_events(self, event_peak: int) -> bool:
        return self.reported_peak_bytes is not None and self.reported_peak_bytes > event_peak


def counters(trace: Trace, device: str) -> Counters:
    """The counters of `device`. Each device of a run asks: the codes of every
    name are found once, and each name's counters read once, so a run of
    thousands of devices costs in proportion to its devices, not their square."""
    found: dict[str, Counters] = trace.derived("counters by device", dict)
    if device not in found:
        found[device] = _read(trace, _codes_by_name(trace).get(device, []))
    return found[device]


def _codes_by_name(trace: Trace) -> dict[str, list[int]]:
    """Every code of each device name (an Arrow dictionary may hold a name twice)."""

    def group() -> dict[str, list[int]]:
        codes: dict[str, list[int]] = {}
        for code, name in enumerate(trace.codes("device")[1]):
            codes.setdefault(name, []).append(code)
        return codes

    return trace.derived("device codes by name", group)


def _read(trace: Trace, codes: list[int]) -> Counters:
    if not codes:
        return Counters(0, None, None)
    rows = np.concatenate([trace.rows_of("device", code) for code in codes])
    samples = rows[trace.is_kind(SAMPLE)[rows]]
    return Counters(
        samples=len(samples),
        reported_peak_bytes=_largest(trace, "peak_bytes_in_use", rows),
        sampled_peak_bytes=_largest(trace, "bytes_in_use", samples),
        pool_bytes=_largest(trace, "pool_bytes", rows),
        limit_bytes=_largest(trace, "bytes_limit", rows),
    )


def _largest(trace: Trace, column: str, rows: np.ndarray) -> int | None:
    chosen = rows[trace.valid(column)[rows]]
    return int(trace.numbers_at(column, chosen).max()) if len(chosen) else None
