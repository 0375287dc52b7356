"""A buffer whose free fell in a gap of the capture (TensorFlow's profiler
sessions switching): when it stopped being live (tpumem/analysis/allocators/unseen_frees.py),
on hand-built traces with the allocator's own counts, and on a real Keras fit()."""

from __future__ import annotations

import json

from conftest import run_tpumem
from sample_traces import KiB, MiB
from tpumem.analysis import analyze
from tpumem.analysis.allocators.chunk_map import Chunks
from tpumem.analysis.device_events import split_by_device
from tpumem.analysis.peak import live_at
from tpumem.trace.reader import load
from tpumem.trace.schema import CAPTURE_GAP, CAPTURE_RESUMED


def _alloc(time_ns, buffer, address, size, in_use, op):
    return {"kind": "alloc", "time_ns": time_ns, "device": "CPU:0", "buffer_id": buffer,
            "address": address, "bytes": size, "bytes_in_use": in_use, "op": op}  # fmt: skip


def _free(time_ns, buffer, address, size, in_use):
    return {"kind": "free", "time_ns": time_ns, "device": "CPU:0", "buffer_id": buffer,
            "address": address, "bytes": size, "bytes_in_use": in_use}  # fmt: skip


def _gap(start, end):
    return [
        {"kind": "mark", "time_ns": start, "text": CAPTURE_GAP},
        {"kind": "mark", "time_ns": end, "text": CAPTURE_RESUMED},
    ]


def test_a_weight_made_before_a_gap_is_live_at_a_peak_after_it(make_trace):
    """A weight (1 MiB) is made in the first session and never freed; the peak
    comes after a gap, in the next session. The allocator's count says the
    weight is still there: the peak names it, nothing is allocated unseen."""
    rows = [
        _alloc(5, 1, 0, MiB, MiB, "weight"),
        *_gap(10, 20),
        _alloc(25, 2, 2 * MiB, 256 * KiB, MiB + 256 * KiB, "activation"),
        _free(30, 2, 2 * MiB, 256 * KiB, MiB),
    ]
    (device,) = analyze(load(make_trace(rows))).devices
    assert device.peak.bytes == MiB + 256 * KiB
    assert {g.op: g.bytes for g in device.peak.groups} == {"weight": MiB, "activation": 256 * KiB}
    assert device.peak.unattributed_bytes == 0


def test_a_buffer_whose_range_is_used_again_in_part_was_freed_in_the_gap(make_trace):
    """a (1 MiB at 0) is freed unseen in the gap; BFC splits its chunk, and the
    next session's b takes 256 KiB from its middle. The profiler sees every free
    in a session, so a went in the gap: it ends at the session's first event, c."""
    rows = [
        _alloc(5, 1, 0, MiB, MiB, "a"),
        _alloc(6, 2, MiB, 512 * KiB, MiB + 512 * KiB, "w"),
        *_gap(10, 20),
        _alloc(25, 3, 4 * MiB, 256 * KiB, 768 * KiB, "c"),
        _alloc(26, 4, 512 * KiB, 256 * KiB, MiB, "b"),
    ]
    (events,) = split_by_device(load(make_trace(rows)))
    assert events.ends().tolist() == [2, 4, 4, 4]
    assert live_at(events, 2).tolist() == [1, 2]
    chunks = Chunks.of(events)
    assert sorted(zip(chunks.first.tolist(), chunks.end.tolist(), strict=True)) == [
        (0, 2), (1, 4), (2, 4), (3, 4)
    ]  # fmt: skip
    assert (chunks.complete(events)).all()  # the map's bytes are the allocator's


def test_a_free_of_a_buffer_made_in_the_gap_ends_what_held_its_range(make_trace):
    """x (512 KiB at 1 MiB) is freed unseen in the gap, and z is made at 1.25 MiB
    there, also unseen; z's free in the next session shows x was gone before it."""
    rows = [
        _alloc(5, 1, 0, MiB, MiB, "w"),
        _alloc(6, 2, MiB, 512 * KiB, MiB + 512 * KiB, "x"),
        *_gap(10, 20),
        _free(25, 3, MiB + 256 * KiB, 256 * KiB, MiB),
    ]
    (events,) = split_by_device(load(make_trace(rows)))
    assert events.ends().tolist() == [3, 2, -1]  # x: at the session's first event


def test_more_named_than_the_allocator_holds_ends_every_doubtful_buffer(make_trace):
    """w and x cross the gap; x was freed in it and its range never reused. At
    y the buffers named (w, x, y: 1.75 MiB) would be more than the allocator's
    1.25 MiB: one of w and x is gone and the trace cannot say which, so from y
    both count as allocated unseen, none under a name it may not hold."""
    rows = [
        _alloc(5, 1, 0, MiB, MiB, "w"),
        _alloc(6, 2, MiB, 512 * KiB, MiB + 512 * KiB, "x"),
        *_gap(10, 20),
        _alloc(25, 3, 4 * MiB, 256 * KiB, MiB + 256 * KiB, "y"),
    ]
    trace = load(make_trace(rows))
    (events,) = split_by_device(trace)
    assert events.ends().tolist() == [2, 2, 3]
    assert live_at(events, 2).tolist() == [2]


def test_without_addresses_a_missed_free_ends_at_the_gap(make_trace):
    """No address to see a range reused: the buffer ends at the gap, as before."""
    rows = [
        {"kind": "alloc", "time_ns": 5, "device": "CPU:0", "buffer_id": 1, "bytes": MiB},
        *_gap(10, 20),
        {"kind": "alloc", "time_ns": 25, "device": "CPU:0", "buffer_id": 2, "bytes": MiB},
    ]
    (events,) = split_by_device(load(make_trace(rows)))
    assert events.ends().tolist() == [1, 2]


def test_the_unseen_row_says_where_those_bytes_were_made(make_trace):
    """Bytes held before the capture and bytes made in a gap: the live table's
    row for them says which, in the text and JSON reports."""
    rows = [
        _alloc(5, 1, 0, MiB, 3 * MiB, "before"),  # 2 MiB were held already
        *_gap(10, 20),
        _alloc(25, 2, 2 * MiB, MiB, 5 * MiB, "after"),  # and 1 MiB made in the gap
    ]
    path = make_trace(rows)
    result = run_tpumem("report", str(path), "--full", "--width", "200")
    assert result.returncode == 0, result.stderr
    assert "made before the capture began or in the gap between profiler sessions" in (
        result.stdout
    )
    report = json.loads(run_tpumem("report", str(path), "-f", "json").stdout)
    peak = report["devices"][0]["peak"]
    assert peak["unattributed_bytes"] == 3 * MiB
    assert peak["held_before_capture_bytes"] == 2 * MiB and peak["gaps_before_peak"] == 1
