"""Figures on hand-built traces whose answers are worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest

from sample_traces import KiB, MiB, buffer_rows, chunk_map_rows, unseen_rows
from tpumem.analysis import analyze
from tpumem.analysis.allocators.bfc import fragmentation_ratio, rounded_bytes
from tpumem.analysis.allocators.bfc_model import replay
from tpumem.analysis.allocators.chunk_map import AddressMap, Chunks
from tpumem.analysis.device_events import split_by_device
from tpumem.trace.reader import load


def test_peak_time_step_and_breakdown(make_trace):
    analysis = analyze(load(make_trace(buffer_rows())))
    (device,) = analysis.devices
    assert device.peak.bytes == 400
    assert device.peak.time_ns == 20
    assert device.peak.step == 2
    assert device.peak.live_buffers == 2
    assert device.peak.unattributed_bytes == 0
    assert [(g.op, g.bytes, g.count) for g in device.peak.groups] == [("B", 300, 1), ("A", 100, 1)]
    assert dict(device.peak.by_region) == {"activation": 300, "parameter": 100}
    assert device.peak_label == "derived"
    # Internal waste of the live buffers: (100 - 90) + (300 - 280).
    assert device.waste.at_peak_bytes == 30
    assert device.waste.at_peak_share == pytest.approx(30 / 400)


def test_groups_merge_buffers_with_same_op_and_shape(make_trace):
    rows = [
        {
            "kind": "alloc",
            "time_ns": i,
            "device": "CPU:0",
            "buffer_id": i,
            "bytes": 64,
            "op": "dot",
            "shape": "[16]",
            "dtype": "float32",
        }
        for i in range(3)
    ] + [
        {
            "kind": "alloc",
            "time_ns": 5,
            "device": "CPU:0",
            "buffer_id": 9,
            "bytes": 100,
            "op": "add",
            "shape": "[25]",
            "dtype": "float32",
        }
    ]
    (device,) = analyze(load(make_trace(rows))).devices
    assert [(g.op, g.count, g.bytes) for g in device.peak.groups] == [
        ("dot", 3, 192),
        ("add", 1, 100),
    ]


def test_total_peak_is_peak_of_the_sum_not_sum_of_peaks(make_trace):
    rows = [
        {"kind": "alloc", "time_ns": 1, "device": "GPU:0", "buffer_id": 1, "bytes": 1000},
        {"kind": "free", "time_ns": 2, "device": "GPU:0", "buffer_id": 1, "bytes": 1000},
        {"kind": "alloc", "time_ns": 3, "device": "GPU:1", "buffer_id": 2, "bytes": 600},
        {"kind": "alloc", "time_ns": 4, "device": "GPU:0", "buffer_id": 3, "bytes": 500},
    ]
    analysis = analyze(load(make_trace(rows)))
    assert [d.peak.bytes for d in analysis.devices] == [1000, 600]
    assert (analysis.total_peak_bytes, analysis.total_peak_time_ns) == (1100, 4)


def test_allocator_reported_in_use_includes_bytes_from_before_the_capture(make_trace):
    # The allocator already held 1000 bytes when the capture began.
    rows = unseen_rows()
    (device,) = analyze(load(make_trace(rows))).devices
    assert device.peak.bytes == 1256
    assert device.peak_label == "measured"
    assert device.peak.unattributed_bytes == 1000


def test_rounding_matches_bfc():
    assert [rounded_bytes(n) for n in (1, 256, 257, 1000)] == [256, 256, 512, 1024]


def test_fragmentation_formula():
    assert fragmentation_ratio(0, 0) == 0.0
    assert fragmentation_ratio(1000, 1000) == 0.0
    assert fragmentation_ratio(1000, 250) == pytest.approx(0.75)


def test_fragmentation_of_a_known_chunk_map(make_trace):
    (events,) = split_by_device(load(make_trace(chunk_map_rows())))
    remade = AddressMap(events)
    assert remade.regions.size.tolist() == [2 * MiB]
    # After each event: 4 allocs (the tail is one free block: 0), free b (256K of
    # 1.25M free is outside the 1M tail: 0.2), free d (1/6).
    expected = [0, 0, 0, 0, 0.25 * MiB / (1.25 * MiB), 1 / 6]
    assert remade.fragmentation_at(np.arange(len(events))) == pytest.approx(expected)


def test_replay_places_buffers_like_bfc_and_gives_the_same_fragmentation(make_trace):
    (events,) = split_by_device(load(make_trace(chunk_map_rows())))
    result = replay(events.is_alloc, events.requested, events.buffer_id)
    assert result.pool.tolist() == [2 * MiB] * 6
    assert result.fragmentation[-1] == pytest.approx(1 / 6)
    assert result.in_use[-1] == 512 * KiB


def model_inputs(events):
    """events: ("a", buffer, bytes) or ("f", buffer) -> is_alloc, sizes, buffers."""
    is_alloc = np.array([e[0] == "a" for e in events])
    sizes = np.array([e[2] if e[0] == "a" else 0 for e in events])
    return is_alloc, sizes, np.array([e[1] for e in events])


def run_model(*events):
    return replay(*model_inputs(events))


def test_replay_hands_out_a_whole_chunk_when_splitting_would_leave_too_little():
    # A 1024-byte hole before buffer 2; 600 rounds to 768 and 1024 < 2 * 768: no split.
    result = run_model(("a", 1, 1024), ("a", 2, 256), ("f", 1), ("a", 3, 600), ("a", 4, 100))
    assert (result.address[3], result.chunk_bytes[3]) == (0, 1024)
    assert result.address[4] == 1024 + 256  # best fit: the region's tail
    assert result.pool[-1] == 2 * MiB


def test_replay_coalesces_and_grows_regions_by_doubling():
    result = run_model(("a", 1, 2 * MiB), ("a", 2, MiB), ("f", 2), ("a", 3, 5 * MiB))
    assert result.pool[1] == 6 * MiB  # a second region of 4 MiB
    assert result.largest_free[2] == 4 * MiB  # coalesced back into one block
    assert result.pool[3] == 14 * MiB  # 5 MiB needs 8: the schedule doubles past 4


def test_repeated_steps_are_copied_exactly():
    # A warm-up, then ten identical steps that free in a shuffled order.
    rng = np.random.default_rng(1)
    events, buffer = [("a", 0, 3 * MiB)], 1
    sizes = rng.integers(1000, 300_000, 8)
    for _ in range(11):
        ids = list(range(buffer, buffer + 8))
        events += [("a", b, int(s)) for b, s in zip(ids, sizes, strict=True)]
        events += [("f", ids[k]) for k in (3, 0, 7, 1, 5, 2, 6, 4)]
        buffer += 8
    starts = np.arange(1, len(events), 16)
    plain = replay(*model_inputs(events))
    copied = replay(*model_inputs(events), step_starts=starts)
    assert plain.copied_events == 0
    assert copied.copied_events >= 8 * 16  # the steps after the first two repeats
    for name in ("in_use", "pool", "largest_free", "address", "chunk_bytes"):
        assert (getattr(plain, name) == getattr(copied, name)).all(), name


def test_timeline_keeps_the_peak_and_carries_values_over_empty_bins(make_trace):
    rows = [
        {"kind": "alloc", "time_ns": 0, "device": "CPU:0", "buffer_id": 1, "bytes": 10},
        {"kind": "alloc", "time_ns": 1, "device": "CPU:0", "buffer_id": 2, "bytes": 90},
        {"kind": "free", "time_ns": 2, "device": "CPU:0", "buffer_id": 2, "bytes": 90},
        {"kind": "alloc", "time_ns": 100, "device": "CPU:0", "buffer_id": 3, "bytes": 5},
    ]
    (device,) = analyze(load(make_trace(rows)), bins=10).devices
    assert device.timeline.in_use_max[0] == 100
    assert device.timeline.in_use_max[1:9] == (10,) * 8
    assert device.timeline.in_use_max[9] == 15


def test_address_map_check_agrees_and_gives_the_pool(make_trace):
    rows = chunk_map_rows()
    in_use = [256, 512, 768, 1024, 768, 512]
    frag = [0, 0, 0, 0, 0.2, 1 / 6]
    for row, used, f in zip(rows, in_use, frag, strict=True):
        row.update(bytes_in_use=used * KiB, fragmentation=f)
    (device,) = analyze(load(make_trace(rows))).devices
    assert device.fragmentation.label == "measured"
    assert device.fragmentation.check_agrees
    assert device.preallocation.pool_peak_bytes == 2 * MiB
    assert device.preallocation.pool_label == "derived"
    assert device.preallocation.unused_bytes == 2 * MiB - 1024 * KiB


def test_no_address_map_check_while_chunks_predate_the_capture(make_trace):
    """A 1 MiB chunk at the region's start was allocated before the capture and is
    never freed. The allocator's view after freeing a: free [1M, 1.25M) and
    [1.5M, 2M), so fragmentation = 256K / 768K = 1/3. The map never holds every live
    chunk (its bytes never equal the bytes in use), so nothing is checked and no
    pool is claimed."""
    base = 1 << 40
    rows = [
        {
            "kind": "alloc",
            "time_ns": 1,
            "device": "GPU:0",
            "buffer_id": 1,
            "address": base + MiB,
            "bytes": 256 * KiB,
            "bytes_in_use": MiB + 256 * KiB,
            "fragmentation": 0.0,
        },
        {
            "kind": "alloc",
            "time_ns": 2,
            "device": "GPU:0",
            "buffer_id": 2,
            "address": base + MiB + 256 * KiB,
            "bytes": 256 * KiB,
            "bytes_in_use": MiB + 512 * KiB,
            "fragmentation": 0.0,
        },
        {
            "kind": "free",
            "time_ns": 3,
            "device": "GPU:0",
            "buffer_id": 1,
            "address": base + MiB,
            "bytes": 256 * KiB,
            "bytes_in_use": MiB + 256 * KiB,
            "fragmentation": 1 / 3,
        },
    ]
    (device,) = analyze(load(make_trace(rows))).devices
    assert device.fragmentation.maximum == pytest.approx(1 / 3)
    assert device.fragmentation.check_agrees is None
    assert "never holds every live chunk" in device.fragmentation.check_unavailable
    assert device.preallocation.pool_peak_bytes is None
    assert device.peak.unattributed_bytes == MiB


def test_a_chunk_the_capture_missed_counts_from_when_it_is_freed(make_trace):
    """Region [0, 2M). c (1 MiB at 0) was allocated unseen; a takes [1M, 1.25M),
    then c is freed: the map holds every live chunk from then on and checks there.
    After c's free: free [0, 1M) + [1.25M, 2M) = 1.75 MiB, largest 1 MiB, so
    fragmentation = 0.75/1.75 = 3/7; after b takes [1.25M, 1.5M): free 1.5 MiB,
    largest 1 MiB, so 1/3."""
    base = 1 << 40
    common = {"device": "GPU:0", "bytes": 256 * KiB}
    rows = [
        {"kind": "alloc", "time_ns": 1, "buffer_id": 1, "address": base + MiB, **common,
         "bytes_in_use": MiB + 256 * KiB, "fragmentation": 0.0},
        {"kind": "free", "time_ns": 2, "buffer_id": 9, "address": base, "device": "GPU:0",
         "bytes": MiB, "bytes_in_use": 256 * KiB, "fragmentation": 3 / 7},
        {"kind": "alloc", "time_ns": 3, "buffer_id": 2, "address": base + MiB + 256 * KiB,
         **common, "bytes_in_use": 512 * KiB, "fragmentation": 1 / 3},
    ]  # fmt: skip
    (device,) = analyze(load(make_trace(rows))).devices
    frag = device.fragmentation
    assert frag.check_agrees is True
    assert frag.check_points == 3  # c counts as live from the start
    assert frag.check_max_error < 1e-9
    assert device.preallocation.pool_peak_bytes == 2 * MiB


def test_quiet_points_find_step_boundaries_without_marks():
    from tpumem.analysis.allocators.bfc_model import quiet_points

    # A parameter, then three steps of two activations each.
    is_alloc = np.array([1, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0], dtype=bool)
    assert quiet_points(is_alloc, most=10).tolist() == [1, 5, 9]


def test_chunks_the_capture_missed_in_a_gap_are_placed_in_the_gap(make_trace):
    """Region [0, 2M). Seen: a = 512K at 0, then a gap (10..20 ns) in which a is
    freed and c = 256K allocated at 1.5M, both unseen. Then b = 512K at 0 (a's
    address, so a was gone by then) and c's free. Placed in the gap, the map holds
    every live chunk after every event, and agrees with the reported figures:
    after b, free [512K, 1.5M) + [1.75M, 2M) = 1.25M, largest 1M: 0.2;
    after c's free, free 1.5M in one piece: 0."""
    common = {"device": "GPU:0"}
    rows = [
        {"kind": "alloc", "time_ns": 5, "buffer_id": 1, "address": 0, "bytes": 512 * KiB,
         "bytes_in_use": 512 * KiB, "fragmentation": 0.0, **common},
        {"kind": "mark", "time_ns": 10, "text": "capture gap"},
        {"kind": "mark", "time_ns": 20, "text": "capture resumed"},
        {"kind": "alloc", "time_ns": 25, "buffer_id": 2, "address": 0, "bytes": 512 * KiB,
         "bytes_in_use": 768 * KiB, "fragmentation": 0.2, **common},
        {"kind": "free", "time_ns": 30, "buffer_id": 3, "address": 1536 * KiB,
         "bytes": 256 * KiB, "bytes_in_use": 512 * KiB, "fragmentation": 0.0, **common},
    ]  # fmt: skip
    trace = load(make_trace(rows))
    (events,) = split_by_device(trace)
    assert events.gaps_ns.tolist() == [[10, 20]]
    chunks = Chunks.of(events)
    # a lives until b's event (the first after the gap); c from then until its free.
    assert sorted(zip(chunks.first.tolist(), chunks.end.tolist(), strict=True)) == [
        (0, 1), (1, 2), (1, 3)
    ]  # fmt: skip
    (device,) = analyze(trace).devices
    assert device.fragmentation.check_agrees is True
    assert device.fragmentation.check_points == 3
    assert device.preallocation.pool_peak_bytes == 2 * MiB


def test_a_pool_the_allocator_reports_is_the_measured_preallocation(make_trace):
    """JAX on GPU preallocates 75% of the device; memory_stats() says so
    (pool_bytes, bytes_limit), and that beats any model of the pool."""
    GiB = 1 << 30
    rows = [
        {
            "kind": "sample",
            "time_ns": 0,
            "device": "GPU:0",
            "bytes_in_use": 0,
            "pool_bytes": 60 * GiB,
            "bytes_limit": 60 * GiB,
        },
        {"kind": "alloc", "time_ns": 1, "device": "GPU:0", "buffer_id": 1, "bytes": 3 * GiB},
        {"kind": "alloc", "time_ns": 2, "device": "GPU:0", "buffer_id": 2, "bytes": GiB},
        {"kind": "free", "time_ns": 3, "device": "GPU:0", "buffer_id": 1, "bytes": 3 * GiB},
    ]
    metadata = {"env": {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".75"}}
    (device,) = analyze(load(make_trace(rows, metadata))).devices
    pre = device.preallocation
    assert device.peak.bytes == 4 * GiB
    assert pre.pool_peak_bytes == 60 * GiB and pre.pool_label == "measured"
    assert pre.unused_bytes == 56 * GiB
    assert pre.limit_bytes == 60 * GiB
    assert pre.settings == {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".75"}


def test_a_program_far_above_the_recorded_peak_says_the_capture_missed_it(make_trace):
    """A framework's program needs 690 MiB by XLA's own analysis while the trace's
    peak is 2.6 MiB (Keras on JAX recorded as TensorFlow did): the report says the
    capture missed it, rather than a 2.6 MiB peak alone."""
    rows = [
        {"kind": "alloc", "time_ns": 1, "device": "CPU:0", "buffer_id": 1, "bytes": 2_700_000},
        {"kind": "free", "time_ns": 2, "device": "CPU:0", "buffer_id": 1, "bytes": 2_700_000},
    ]
    step = '{"name": "jit_train_step", "argument_bytes": 400000000, "temp_bytes": 290000000}'
    small = '{"name": "jit_small", "argument_bytes": 1000000, "temp_bytes": 1000000}'
    missed = analyze(load(make_trace([*rows, _program(3, step)], name="missed.tpumem")))
    (said,) = [w for w in missed.warnings if "capture missed" in w]
    assert said.startswith("jit_train_step needs 658.0 MiB") and "2.6 MiB" in said
    fine = analyze(load(make_trace([*rows, _program(3, small)], name="fine.tpumem")))
    assert not [w for w in fine.warnings if "capture missed" in w]


def _program(time_ns: int, text: str) -> dict:
    return {"kind": "program", "time_ns": time_ns, "text": text}


def test_a_modeled_pool_never_exceeds_the_allocators_measured_limit(make_trace):
    """The BFC model grows its pool by regions; an allocator whose limit it
    measured (1.5 MiB here) cannot hold more: the pool is capped there, and says so."""
    rows = [
        {"kind": "sample", "time_ns": 0, "device": "GPU:0", "bytes_limit": 3 * MiB // 2},
        {"kind": "alloc", "time_ns": 1, "device": "GPU:0", "buffer_id": 1, "bytes": MiB},
        {"kind": "alloc", "time_ns": 2, "device": "GPU:0", "buffer_id": 2, "bytes": MiB // 4},
    ]
    (device,) = analyze(load(make_trace(rows))).devices
    pre = device.preallocation
    assert pre.pool_label == "modeled" and pre.limit_bytes == 3 * MiB // 2
    assert pre.pool_peak_bytes == 3 * MiB // 2
    assert "capped at the allocator's measured limit" in pre.pool_source


def test_a_device_with_counters_alone_peaks_at_the_allocators_running_peak(make_trace):
    """A device whose capture read its allocator's counters and recorded no
    allocation (a TensorFlow multi-worker run): its readings stand for events.
    The peak is the running peak the allocator reported, at the reading that
    first saw it (the readings in use missed it), measured; no buffer, no
    allocation, and nothing replayed or modeled."""
    readings = [(10, 1 * MiB, 1 * MiB), (20, 2 * MiB, 5 * MiB), (30, 3 * MiB, 5 * MiB)]
    # The script reset the running peak; it rose again to less than before.
    readings += [(40, 1 * MiB, 1 * MiB), (50, 1 * MiB, 4 * MiB)]
    rows = [
        {
            "kind": "sample",
            "time_ns": t,
            "device": "CPU:0",
            "bytes_in_use": b,
            "peak_bytes_in_use": p,
        }
        for t, b, p in readings
    ]
    trace = load(make_trace(rows, {"fidelity": {"CPU:0": "counter"}}))
    (events,) = split_by_device(trace)
    assert events.counters_only and (events.in_use // MiB).tolist() == [1, 5, 3, 1, 4]
    (device,) = analyze(trace).devices
    assert (device.peak.bytes, device.peak.time_ns, device.peak_label) == (5 * MiB, 20, "measured")
    assert (device.allocations, device.frees, device.allocations_per_s) == (0, 0, None)
    assert device.peak.live_buffers == 0 and device.peak.unattributed_bytes == 5 * MiB
    assert device.fragmentation.label == "not available"
    assert device.waste.label == "not available"
    assert device.preallocation.pool_peak_bytes is None
    # With events, readings stay counters beside them (counters.py), never events.
    events = [{"kind": "alloc", "time_ns": 5, "device": "CPU:0", "buffer_id": 1, "bytes": 64}]
    (device,) = analyze(load(make_trace(events + rows, name="both.tpumem"))).devices
    assert device.allocations == 1 and device.peak.bytes == 64
