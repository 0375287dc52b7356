"""Figures per training step: the maximum of a per-event figure within each step,
exact (every event counts), for plots whose x axis is the step."""

from __future__ import annotations

import numpy as np


def per_step_max(
    time_ns: np.ndarray, values: np.ndarray, step_times: np.ndarray, step_numbers: np.ndarray
) -> list[tuple[int, float]]:
    """(step, maximum of `values` over the events inside it) for each step with
    events; events before the first step mark count for no step. NaNs skipped."""
    if not len(time_ns) or not len(step_times):
        return []
    owner = np.searchsorted(step_times, time_ns, side="right") - 1
    inside = owner >= 0
    owner, vals = owner[inside], values[inside].astype(np.float64)
    known = ~np.isnan(vals)
    owner, vals = owner[known], vals[known]
    if not len(owner):
        return []
    result = np.full(len(step_times), -np.inf)
    np.maximum.at(result, owner, vals)
    return [(int(step_numbers[i]), float(result[i])) for i in np.flatnonzero(np.isfinite(result))]
