"""Series for drawing: a device's bytes in use over time, stacked by region, with
its pool and fragmentation, cut down to at most `points` points.

Each point stands for a stretch of time and is the moment of that stretch where
bytes in use were highest, so no spike (the peak least of all) falls between two
points; for a page, each stretch's last event too, whose bytes hold until the next
stretch. The region stack is read at the same moments, so it adds up to the line.
Only drawing is cut down: every figure in a report comes from all events.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis.allocators.bins import (
    bin_max,
    bin_of,
    highest_and_last_of_bins,
    highest_of_bins,
)
from tpumem.analysis.device_events import DeviceEvents, pair_events, step_marks
from tpumem.analysis.drawing.detail import DetailLevel, finer_stretches
from tpumem.analysis.drawing.largest_buffers import LargestBuffers, largest_buffers
from tpumem.analysis.drawing.moments import Moments, moment_indices, moments
from tpumem.analysis.peak import NO_REGION, STACK, UNSEEN
from tpumem.trace.model import Trace


@dataclass(frozen=True, slots=True)
class DeviceSeries:
    events: int  # how many events the points stand for
    time_ns: tuple[int, ...]
    # Where each point sits in the training loop: step number plus the share of
    # that step gone by; None where the trace has no step marks.
    step_position: tuple[float, ...] | None
    in_use: tuple[int, ...]
    regions: tuple[tuple[str, tuple[int, ...]], ...]  # (region, bytes per point)
    pool: tuple[int, ...] | None
    fragmentation: tuple[float | None, ...]
    # Stretches the capture did not see (start, end): drawn as such, not as a line.
    gaps_ns: tuple[tuple[int, int], ...] = ()
    # The run's clock from its start to its end: a chart spans the whole run,
    # however few events a short one had.
    span_ns: tuple[int, int] = (0, 0)
    detail: tuple[DetailLevel, ...] = ()  # finer drawings, for zooming in
    # The step marks a page ticks its timeline at: (time, step number), at most
    # STEP_TICKS of them, evenly thinned (the page ticks those that have room).
    steps: tuple[tuple[int, int], ...] = ()
    moments: Moments | None = None  # what was live at moments, for "what was live here?"
    largest: LargestBuffers | None = None  # the largest buffers over their lives


def _region_stacks(
    trace: Trace, events: DeviceEvents, drawings: list[np.ndarray]
) -> tuple[list[str], list[list[np.ndarray]]]:
    """Bytes live per region at each drawing's chosen events: (the regions, largest
    first by the first drawing; for each drawing, each region's bytes at its
    events). Every drawing names the same regions, in the same order. A free counts
    for its allocation's region; a free whose allocation went unseen counts nowhere
    (the allocator's own figure still shows it in the line), and an allocation
    whose free went unseen ends by the rule in unseen_frees.py."""
    codes, names = trace.codes("region")
    region = codes[events.row].astype(np.int64)
    partner = pair_events(events.is_alloc, events.buffer_id)
    ends = np.flatnonzero(events.is_alloc & (partner < 0) & (events.ends() < len(events)))
    end_at = events.ends()[ends]
    allocs = np.flatnonzero(events.is_alloc)
    frees = np.flatnonzero(~events.is_alloc & (partner >= 0))
    where = np.concatenate([allocs, frees, end_at])
    owner = np.concatenate([allocs, partner[frees], ends])  # the allocation each change is of
    change = np.concatenate([events.bytes[allocs], -events.bytes[owner[len(allocs) :]]])
    owner_region = region[owner]
    named: list[str] = []
    stacks: list[list[np.ndarray]] = [[] for _ in drawings]
    seen = np.zeros(len(events), np.int64)
    for code in np.unique(owner_region).tolist():
        mine = owner_region == code
        delta = np.zeros(len(events) + 1, np.int64)
        np.add.at(delta, where[mine], change[mine])
        running = np.maximum(np.cumsum(delta)[: len(events)], 0)
        seen += running
        named.append(names[code] if code >= 0 else NO_REGION)
        for stack, chosen in zip(stacks, drawings, strict=True):
            stack.append(running[chosen])
    unseen = np.maximum(events.heap - seen, 0)
    if events.reserved is not None:
        named.append(STACK)
        for stack, chosen in zip(stacks, drawings, strict=True):
            stack.append(events.reserved[chosen])
    if any((unseen[chosen] > 0).any() for chosen in drawings):
        named.append(UNSEEN)
        for stack, chosen in zip(stacks, drawings, strict=True):
            stack.append(unseen[chosen])
    order = sorted(range(len(named)), key=lambda r: -int(stacks[0][r].max(initial=0)))
    return [named[r] for r in order], [[stack[r] for r in order] for stack in stacks]


def step_positions(trace: Trace, time_ns: np.ndarray) -> np.ndarray | None:
    """Step number plus the share of the step gone by, at each time; what comes
    before the first step mark (start-up, compiling) is squeezed into the one step
    before it, so runs with long and short start-ups line up at their loops."""
    times, numbers = step_marks(trace)
    if len(times) < 2 or not len(time_ns):
        return None
    typical = float(np.median(np.diff(times))) or 1.0
    index = np.clip(np.searchsorted(times, time_ns, side="right") - 1, 0, len(times) - 1)
    following = np.append(times[1:], times[-1] + typical)
    length = np.maximum(following[index] - times[index], 1)
    position: np.ndarray = numbers[index] + (time_ns - times[index]) / length
    before = time_ns < times[0]
    if before.any():
        first = min(int(time_ns[0]), int(times[0]) - 1)
        position[before] = numbers[0] - 1 + (time_ns[before] - first) / (times[0] - first)
    return position


STEP_TICKS = 2000  # step marks a page keeps for its timeline's ticks


def _step_ticks(trace: Trace) -> tuple[tuple[int, int], ...]:
    times, numbers = step_marks(trace)
    every = max(1, -(-len(times) // STEP_TICKS))
    return tuple(zip(times[::every].tolist(), numbers[::every].tolist(), strict=True))


def _pool_points(
    pool: np.ndarray | None, bins: np.ndarray, chosen: np.ndarray, count: int
) -> tuple[int, ...] | None:
    """The pool held in each drawn event's stretch (the stretch's highest)."""
    if pool is not None and len(pool) == len(bins):
        return tuple(int(v) for v in bin_max(bins, pool, count)[bins[chosen]])
    if pool is not None and len(pool):
        return (int(pool.max()),) * len(chosen)
    return None


def device_series(
    trace: Trace,
    events: DeviceEvents,
    fragmentation: np.ndarray,
    pool: np.ndarray | None,
    points: int,
    span_ns: tuple[int, int] = (0, 0),
    explore: bool = False,
    page: bool = True,
) -> DeviceSeries:
    """With `explore`, each stretch's last event among the points too. Without
    `page`, the points' bytes in use alone (a process's line in its summary): not
    the regions, pool and fragmentation a page draws, nor the finer levels, moments
    and largest buffers it is explored by, most of the series' cost."""
    gaps = tuple((int(start), int(end)) for start, end in events.gaps_ns.tolist())
    if not len(events):
        return DeviceSeries(0, (), None, (), (), None, (), gaps, span_ns)
    bins = bin_of(events.time_ns, points)
    if explore:
        # Each stretch's last event too: what it left in use holds until the next
        # stretch, so a quiet time (an evaluation, the run's end) is drawn as it was.
        chosen = highest_and_last_of_bins(bins, events.in_use)
    else:
        chosen, _ = highest_of_bins(bins, events.in_use)
    times = events.time_ns[chosen]
    steps = step_positions(trace, times)
    step_position = None if steps is None else tuple(round(float(s), 4) for s in steps)
    if not page:
        return DeviceSeries(
            events=len(events),
            time_ns=tuple(times.tolist()),
            step_position=step_position,
            in_use=tuple(events.in_use[chosen].tolist()),
            regions=(),
            pool=None,
            fragmentation=(),
            gaps_ns=gaps,
            span_ns=span_ns,
        )
    point_bin = bins[chosen]  # each point's stretch: its pool and fragmentation are the stretch's
    frag = bin_max(bins, fragmentation, points)[point_bin]
    finer = finer_stretches(events, points, len(chosen)) if explore else []
    names, stacks = _region_stacks(trace, events, [chosen, *(f.chosen for f in finer)])
    detail = tuple(
        DetailLevel(
            stretches=f.stretches,
            time_ns=tuple(events.time_ns[f.chosen].tolist()),
            in_use=tuple(events.in_use[f.chosen].tolist()),
            regions=tuple(tuple(values.tolist()) for values in stack),
            pool=_pool_points(pool, f.bins, f.chosen, f.stretches),
        )
        for f, stack in zip(finer, stacks[1:], strict=True)
    )
    return DeviceSeries(
        events=len(events),
        time_ns=tuple(times.tolist()),
        step_position=step_position,
        in_use=tuple(events.in_use[chosen].tolist()),
        regions=tuple(
            (name, tuple(values.tolist())) for name, values in zip(names, stacks[0], strict=True)
        ),
        pool=_pool_points(pool, bins, chosen, points),
        fragmentation=tuple(None if np.isnan(v) else round(float(v), 5) for v in frag),
        gaps_ns=gaps,
        span_ns=span_ns,
        detail=detail,
        steps=_step_ticks(trace) if explore else (),
        moments=moments(trace, events, moment_indices(events)) if explore else None,
        largest=largest_buffers(trace, events) if explore else None,
    )
