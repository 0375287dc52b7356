"""Preallocation: what the allocator held from the device against what was used,
and the settings that made it so."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tpumem.analysis import provenance
from tpumem.trace.metadata import SETTINGS_OF, SETTINGS_VARIABLES, TraceMetadata


@dataclass(frozen=True, slots=True)
class Preallocation:
    pool_peak_bytes: int | None
    pool_at_peak_bytes: int | None  # the pool when bytes in use peaked
    pool_label: str
    pool_source: str
    unused_bytes: int | None  # pool peak - peak in use
    limit_bytes: int | None  # the allocator's memory limit, where reported
    capacity_bytes: int | None  # the device's memory, where recorded
    settings: dict[str, str]
    # Smallest share of the device's memory that would still have held the peak
    # (XLA_CLIENT_MEM_FRACTION, or a TF memory limit of that size).
    smallest_fraction: float | None


def _settings(metadata: TraceMetadata) -> dict[str, str]:
    settings = {str(k): str(v) for k, v in (metadata.allocator_settings or {}).items()}
    environment = metadata.env or {}
    for name in SETTINGS_OF.get(metadata.framework, SETTINGS_VARIABLES):
        if name in environment:
            settings[name] = str(environment[name])
    return settings


def preallocation(
    metadata: TraceMetadata,
    device: str,
    peak_bytes: int,
    peak_index: int,
    pool: np.ndarray | None,
    pool_label: str,
    pool_source: str,
    limit: int | None,
) -> Preallocation:
    pool_peak = pool_at_peak = None
    if pool is not None and len(pool):
        pool_peak = int(pool.max())
        # A series has a value per event; a single reading stands for the run.
        pool_at_peak = int(pool[peak_index] if len(pool) > peak_index else pool[-1])
    elif not pool_source:
        pool_label, pool_source = provenance.NOT_AVAILABLE, "the trace has no view of the pool"
    if pool_label == provenance.MODELED and limit and pool_peak is not None and pool_peak > limit:
        # The allocator cannot hold more than its limit, which it measured: the
        # model's pool, grown past it, is capped there and says so.
        pool_peak, pool_at_peak = limit, min(pool_at_peak or 0, limit)
        pool_source += "; capped at the allocator's measured limit, which the model grew past"
    capacity = metadata.capacity_of(device)
    fraction = math.ceil(peak_bytes / capacity * 100) / 100 if capacity else None
    return Preallocation(
        pool_peak_bytes=pool_peak,
        pool_at_peak_bytes=pool_at_peak,
        pool_label=pool_label,
        pool_source=pool_source,
        unused_bytes=None if pool_peak is None else max(0, pool_peak - peak_bytes),
        limit_bytes=limit,
        capacity_bytes=capacity,
        settings=_settings(metadata),
        smallest_fraction=fraction,
    )
