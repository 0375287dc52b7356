"""External fragmentation per device: the allocator's own figure, checked against
the address map, or the BFC model's figure where the trace has only lifetimes."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tpumem.analysis import provenance
from tpumem.analysis.allocators.bfc_model import ReplayResult
from tpumem.analysis.allocators.chunk_map import AddressMap, spread
from tpumem.analysis.device_events import DeviceEvents

CHECK_POINTS = 64  # address-map check points, besides the peak and the maximum
MIN_CHECK_POINTS = 3  # fewer agreeing points do not vouch for the regions (the pool)
# TF writes fragmentation with six significant digits; a map that is right agrees
# far inside this, one that misses chunks is off by whole percent.
CHECK_TOLERANCE = 1e-4
INCOMPLETE_MAP = (
    "the address map never holds every live chunk: some were allocated where the "
    "capture did not see them (before it began, or between its profiler sessions) "
    "and were never freed"
)


@dataclass(frozen=True, slots=True)
class Fragmentation:
    label: str  # provenance.MEASURED / DERIVED / MODELED / NOT_AVAILABLE
    source: str  # what the figure comes from, in words
    at_peak: float | None
    maximum: float | None
    time_of_maximum_ns: int | None
    # The address map's recomputation against the reported figure, when both exist.
    check_points: int = 0
    check_max_error: float | None = None
    check_schedule: str | None = None
    check_unavailable: str | None = None  # why there was nothing to check, if so

    @property
    def check_agrees(self) -> bool | None:
        if self.check_max_error is None:
            return None
        return self.check_max_error <= CHECK_TOLERANCE


@dataclass(frozen=True, slots=True)
class FragmentationSeries:
    """A figure per event (NaN where unknown), and how it was obtained."""

    values: np.ndarray
    pool: np.ndarray | None
    figure: Fragmentation


def _summary(
    events: DeviceEvents, values: np.ndarray, peak_index: int, label: str, source: str
) -> Fragmentation:
    known = ~np.isnan(values)
    if not known.any():
        return Fragmentation(provenance.NOT_AVAILABLE, source, None, None, None)
    where = int(np.nanargmax(values))
    return Fragmentation(
        label=label,
        source=source,
        at_peak=None if np.isnan(values[peak_index]) else float(values[peak_index]),
        maximum=float(values[where]),
        time_of_maximum_ns=int(events.time_ns[where]),
    )


def fragmentation(
    events: DeviceEvents, peak_index: int, model: ReplayResult | None
) -> FragmentationSeries:
    reported = events.reported_fragmentation
    if reported is not None and not np.isnan(reported).all():
        figure = _summary(
            events, reported, peak_index, provenance.MEASURED, "the allocator's own figure"
        )
        pool = None
        if events.has_addresses:
            address_map = AddressMap(events)
            # Checked where the map holds every live chunk, the peak and the
            # maximum among them when it does there.
            complete = np.flatnonzero(address_map.complete)
            extremes = np.array([peak_index, int(np.nanargmax(reported))])
            checked = np.union1d(
                spread(complete, CHECK_POINTS), extremes[address_map.complete[extremes]]
            )
            if len(checked):
                errors = np.abs(address_map.fragmentation_at(checked) - reported[checked])
                figure = replace(
                    figure,
                    check_points=len(checked),
                    check_max_error=float(np.nanmax(errors)),
                    check_schedule=address_map.regions.schedule,
                )
                if len(checked) < MIN_CHECK_POINTS:
                    figure = replace(
                        figure,
                        check_unavailable=f"the address map holds every live chunk at only "
                        f"{len(checked)} events, too few to vouch for its regions",
                    )
            else:
                figure = replace(figure, check_unavailable=INCOMPLETE_MAP)
            # A map that disagrees misses chunks, so the regions it implies are
            # not the allocator's pool.
            if figure.check_agrees and not figure.check_unavailable:
                pool = address_map.regions.pool_series(len(events))
        return FragmentationSeries(reported, pool, figure)
    if model is not None:
        values = model.fragmentation
        figure = _summary(
            events,
            values,
            peak_index,
            provenance.MODELED,
            f"{model.source} replaying lifetimes",
        )
        return FragmentationSeries(values, model.pool, figure)
    empty = np.full(len(events), np.nan)
    return FragmentationSeries(
        empty, None, Fragmentation(provenance.NOT_AVAILABLE, "no allocator view", None, None, None)
    )
