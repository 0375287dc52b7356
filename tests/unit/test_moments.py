"""What a page shows of a run at any zoom and any moment, computed by the analysis:
the live set at each moment (one sweep for all moments) must equal peak.live_at and
peak.live_groups at that event, whatever the number of groups (the sweep's blocks);
the finer levels keep every spike and dip, and are stacked by the same regions
as the whole run; the largest buffers' blocks never
overlap while both are live."""

from __future__ import annotations

import numpy as np
import pytest

from tpumem.analysis import analyze
from tpumem.analysis.device_events import split_by_device
from tpumem.analysis.drawing import moments as moments_module
from tpumem.analysis.drawing.detail import finer_stretches
from tpumem.analysis.drawing.largest_buffers import largest_buffers
from tpumem.analysis.drawing.moments import MOMENT_GROUPS, moment_indices, moments
from tpumem.analysis.peak import live_at, live_groups
from tpumem.trace.reader import load


def _random_rows(seed: int, count: int, groups: int, unseen_frees: bool = False) -> list[dict]:
    """Allocations and frees in a random order: a few ops, lines and shapes, some
    equal sizes (ties between groups), some buffers never freed."""
    rng = np.random.default_rng(seed)
    rows, live, time = [], [], 0
    for buffer in range(count):
        time += int(rng.integers(0, 3))  # equal times too
        size = int(rng.choice([256, 512, 4096, int(rng.integers(1, 1 << 20))]))
        rows.append(
            {
                "kind": "alloc",
                "time_ns": time,
                "device": "GPU:0",
                "buffer_id": buffer,
                "bytes": size,
                "op": f"op{int(rng.integers(0, groups))}",
                "source": f"train.py:{int(rng.integers(1, 4))}",
                "shape": f"[{int(rng.integers(1, 3))}]",
            }
        )
        live.append(buffer)
        while live and rng.random() < 0.45:
            gone = live.pop(int(rng.integers(0, len(live))))
            if unseen_frees and rng.random() < 0.1:
                continue  # its free never recorded
            time += int(rng.integers(0, 3))
            rows.append({"kind": "free", "time_ns": time, "device": "GPU:0", "buffer_id": gone})
    return rows


def _expected(trace, events, index):
    groups = live_groups(trace, events, live_at(events, index))
    return [((g.op, g.region, g.dtype, g.shape, g.source), g.bytes, g.count) for g in groups]


@pytest.mark.parametrize(
    ("seed", "count", "groups", "bins", "cells"),
    [
        (1, 400, 3, 10_000, 1 << 22),  # every event a moment
        (2, 3000, 40, 300, 1 << 22),  # the highest of each stretch
        (3, 3000, 40, 300, 2048),  # many blocks of the groups' stretches
        (4, 2000, 200, 50, 1 << 22),  # more groups than a moment names
    ],
)
def test_each_moment_is_the_live_set_after_its_event(
    make_trace, monkeypatch, seed, count, groups, bins, cells
):
    monkeypatch.setattr(moments_module, "_CELLS", cells)
    trace = load(make_trace(_random_rows(seed, count, groups, unseen_frees=seed == 2)))
    (events,) = split_by_device(trace)
    indices = moment_indices(events, bins)
    assert (np.diff(indices) > 0).all()
    assert int(np.argmax(events.in_use)) in indices and len(events) - 1 in indices
    taken = moments(trace, events, indices)
    assert taken.event_index[taken.peak] == int(np.argmax(events.in_use))
    for j, index in enumerate(indices.tolist()):
        expected = _expected(trace, events, index)
        shown = [(taken.groups[g], b, c) for g, b, c in taken.top[j]]
        assert shown == expected[:MOMENT_GROUPS], (j, index)
        assert taken.live_bytes[j] == sum(b for _, b, _ in expected)
        assert taken.live_buffers[j] == sum(c for _, _, c in expected)
        assert taken.in_use[j] == int(events.in_use[index])
        rest = expected[MOMENT_GROUPS:]
        assert taken.rest_bytes[j] == sum(b for _, b, _ in rest)
        assert taken.rest_buffers[j] == sum(c for _, _, c in rest)
        following = int(events.time_ns[index + 1]) if index + 1 < len(events) else None
        assert taken.until_ns[j] == following


def test_finer_levels_keep_every_spike_and_dip_by_the_same_regions(make_trace):
    rows, sizes = _random_rows(5, 5000, 5), {}
    for row in rows:
        if row["kind"] == "alloc":
            row["region"] = ("parameter", "temp", "output")[row["buffer_id"] % 3]
            sizes[row["buffer_id"]] = row["bytes"]
        else:
            row["bytes"] = sizes[row["buffer_id"]]  # as every framework's free says
    trace = load(make_trace(rows))
    (events,) = split_by_device(trace)
    (device,) = analyze(trace, series_points=20).devices
    series = device.series
    assert [level.stretches for level in series.detail] == [160, 1280]
    names = [name for name, _ in series.regions]
    assert sorted(names) == ["output", "parameter", "temp"]
    at = {(int(t), int(v)) for t, v in zip(events.time_ns, events.in_use, strict=True)}
    for level in series.detail:
        assert max(level.in_use) == int(events.in_use.max())
        assert min(level.in_use) == int(events.in_use.min())
        # Each point is a real event's time and bytes, the last the run's last.
        assert set(zip(level.time_ns, level.in_use, strict=True)) <= at
        assert level.time_ns == tuple(sorted(level.time_ns))
        assert level.in_use[-1] == int(events.in_use[-1])
        # The same regions as the whole run's, adding up to the line at each point.
        assert len(level.regions) == len(names)
        for k, in_use in enumerate(level.in_use):
            assert sum(values[k] for values in level.regions) == in_use
    # The finest level is the whole run's regions at more of its events: where an
    # event (the one at its time) is drawn in both, its regions are the same.
    finest = series.detail[-1]
    times, counts = np.unique(events.time_ns, return_counts=True)
    alone = set(times[counts == 1].tolist())
    index = {t: k for k, t in enumerate(finest.time_ns) if t in alone}
    shared = [(j, index[t]) for j, t in enumerate(series.time_ns) if t in index]
    assert shared
    for r, (_, values) in enumerate(series.regions):
        assert all(values[j] == finest.regions[r][k] for j, k in shared)


def test_a_run_each_stretch_drew_wholly_has_no_finer_level(make_trace):
    trace = load(make_trace(_random_rows(5, 5000, 5)))
    (events,) = split_by_device(trace)
    assert len(finer_stretches(events, 20, drawn=20)) == 2
    assert finer_stretches(events, 20, drawn=len(events)) == []


def test_the_largest_buffers_never_overlap_while_both_live(make_trace):
    trace = load(make_trace(_random_rows(6, 2000, 5)))
    (events,) = split_by_device(trace)
    view = largest_buffers(trace, events, count=100)
    assert len(view.buffers) == 100 and view.allocations == int(events.is_alloc.sum())
    smallest = min(b.bytes for b in view.buffers)
    assert smallest >= np.sort(events.bytes[events.is_alloc])[-100]
    end = 2**63
    for i, a in enumerate(view.buffers):
        for b in view.buffers[i + 1 :]:
            both = max(a.start_ns, b.start_ns) < min(a.end_ns or end, b.end_ns or end)
            apart = a.offset + a.bytes <= b.offset or b.offset + b.bytes <= a.offset
            assert not both or apart, (a, b)


def test_a_short_run_spans_its_real_length(make_trace):
    """One allocation 0.126 s into a run that ended at 0.2 s: the page's axis is
    the run's, not a second from the only point."""
    alloc = {"kind": "alloc", "time_ns": 126_000_000, "device": "GPU:0", "buffer_id": 1}
    rows = [{**alloc, "bytes": 8}]
    trace = load(make_trace(rows, {"end_time_ns": 200_000_000}))
    (device,) = analyze(trace, series_points=1500).devices
    assert device.series.span_ns == (0, 200_000_000)
    assert device.series.moments.top[0] == ((0, 8, 1),)


def test_sizes_near_the_largest_a_trace_holds_sum_exactly(make_trace):
    """Sizes up to 2^50 each (trace/values.py's bound): their sums pass a float's
    53 bits, and stay exact."""
    sizes = [(1 << 50) - k for k in range(1, 21)]
    rows = [
        {"kind": "alloc", "time_ns": k, "device": "GPU:0", "buffer_id": k, "bytes": size,
         "op": f"op{k % 3}"}
        for k, size in enumerate(sizes)
    ]  # fmt: skip
    trace = load(make_trace(rows))
    (events,) = split_by_device(trace)
    taken = moments(trace, events, moment_indices(events))
    assert taken.live_bytes[-1] == sum(sizes)
    shown = [(taken.groups[g], b, c) for g, b, c in taken.top[-1]]
    assert shown == _expected(trace, events, len(events) - 1)


def test_a_moment_counts_the_stack_apart_as_the_peak_does(make_trace):
    """Bytes reserved outside the heap (a TPU program's stack) are the stack's at a
    moment as at the peak, not bytes no buffer accounts for."""
    rows = [
        {"kind": "alloc", "time_ns": 1, "device": "TPU:0", "buffer_id": 1, "bytes": 1000,
         "bytes_in_use": 1000, "bytes_reserved": 500},
        {"kind": "alloc", "time_ns": 2, "device": "TPU:0", "buffer_id": 2, "bytes": 24,
         "bytes_in_use": 1024, "bytes_reserved": 500},
    ]  # fmt: skip
    trace = load(make_trace(rows))
    (device,) = analyze(trace, series_points=1500).devices
    taken = device.series.moments
    j = taken.peak
    assert taken.stack[j] == device.peak.stack_bytes == 500
    assert taken.unattributed[j] == device.peak.unattributed_bytes == 0
    assert taken.in_use[j] == device.peak.bytes == 1524
