"""Internal waste: bytes handed out beyond what was asked for (rounding)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis import provenance
from tpumem.analysis.device_events import DeviceEvents


@dataclass(frozen=True, slots=True)
class InternalWaste:
    label: str
    at_peak_bytes: int | None  # allocated - requested over the buffers live at the peak
    at_peak_share: float | None  # of the peak's attributed bytes
    total_allocated_bytes: int
    total_requested_bytes: int | None


def internal_waste(events: DeviceEvents, live_at_peak: np.ndarray) -> InternalWaste:
    allocs = events.is_alloc
    allocated = int(events.bytes[allocs].sum())
    if not len(events) or events.counters_only or (events.requested[allocs] < 0).any():
        return InternalWaste(provenance.NOT_AVAILABLE, None, None, allocated, None)
    live_allocated = int(events.bytes[live_at_peak].sum())
    live_waste = live_allocated - int(events.requested[live_at_peak].sum())
    return InternalWaste(
        label=provenance.MEASURED,
        at_peak_bytes=live_waste,
        at_peak_share=live_waste / live_allocated if live_allocated else 0.0,
        total_allocated_bytes=allocated,
        total_requested_bytes=int(events.requested[allocs].sum()),
    )
