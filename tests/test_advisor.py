"""TPU padding, fragmentation headroom and the fit advisor on hand-built traces,
with answers worked out by hand."""

from __future__ import annotations

import pytest

from sample_traces import MiB
from tpumem.analysis import analyze
from tpumem.analysis.padding import element_bits, parse_shape, tiled_bytes
from tpumem.trace.reader import load

GiB = 1 << 30


@pytest.mark.parametrize(
    ("dims", "bits", "padded"),
    [
        ((1000, 1000), 32, 1000 * 1024 * 4),  # DESIGN.md's example: [1000, 1024]
        ((10, 100), 16, 16 * 128 * 2),  # 16-bit: 16 sublanes
        ((10, 100), 8, 32 * 128),  # 8-bit: 32 sublanes
        ((3, 5, 8, 128), 32, 3 * 5 * 8 * 128 * 4),  # already tiled: no padding
        ((25,), 32, 100),  # rank 1: untouched
        ((), 32, 4),
    ],
)
def test_tiled_bytes(dims, bits, padded):
    assert tiled_bytes(dims, bits)[0] == padded


def test_names_of_dtypes_and_shapes():
    assert [element_bits(n) for n in ("float32", "bfloat16", "int8", "bool", "torch.float16")] == [
        32,
        16,
        8,
        8,
        16,
    ]
    assert element_bits("string") is None
    assert parse_shape("[16,64,512]") == (16, 64, 512)
    assert parse_shape("(2, 3)") == (2, 3)
    assert parse_shape("[?,3]") is None


def _alloc(time_ns, buffer_id, size, shape=None, dtype=None, region="output", **extra):
    return {
        "kind": "alloc",
        "time_ns": time_ns,
        "device": "CPU:0",
        "buffer_id": buffer_id,
        "bytes": size,
        "requested_bytes": size,
        "op": f"op{buffer_id}",
        "region": region,
        "shape": shape,
        "dtype": dtype,
        **extra,
    }


def test_the_advisor_counts_padding_on_tpus_only(make_trace):
    big = 17 * GiB  # a temp buffer with no shape: counted in the peak, not in padding
    rows = [
        _alloc(1, 1, 4_000_000, "[1000,1000]", "float32"),
        _alloc(2, 2, 2000, "[10,100]", "bfloat16"),
        _alloc(3, 3, 100, "[25]", "float32"),
        _alloc(4, 4, big, region="temp"),
    ]
    analysis = analyze(load(make_trace(rows, {"framework": "jax", "backend": "cpu"})))
    (device,) = analysis.devices
    peak = 4_000_000 + 2000 + 100 + big
    assert device.peak.bytes == peak
    # [1000,1000] f32 -> [1000,1024]: +96,000; [10,100] bf16 -> [16,128]: +2,096.
    assert device.padding.extra_bytes == 96_000 + 2_096
    assert device.padding.label == "estimated"
    assert device.padding.uncounted_bytes == big
    # The BFC model's pool holds two regions, each with a free tail: the smaller
    # tail is the headroom (fragmentation x free bytes).
    pre, frag = device.preallocation, device.fragmentation
    room = round(frag.at_peak * (pre.pool_at_peak_bytes - peak))
    assert 0 < device.headroom_bytes == room < 8 * MiB
    fit = {row.accelerator: row for row in analysis.fit.rows}
    assert fit["TPU v5e"].needed_bytes == peak + room + 98_096
    assert not fit["TPU v5e"].fits  # 16 GiB
    assert fit["TPU v5p"].fits and fit["TPU v5p"].setting is None
    assert fit["A100 40GB"].needed_bytes == peak + room  # no TPU padding on a GPU
    # 17.0037 GiB of 40 GiB is 0.4251: the smallest fraction that holds it is 0.43.
    assert fit["A100 40GB"].setting == "XLA_CLIENT_MEM_FRACTION=0.43"
    assert fit["H200"].share == pytest.approx((peak + room) / 141e9)


def test_headroom_is_the_free_pool_outside_its_largest_block(make_trace):
    # The allocator reports fragmentation 0.25 at the peak (3 MiB) and an 8 MiB
    # pool: 5 MiB free, a quarter of it in pieces -> 1.25 MiB of headroom.
    rows = [
        _alloc(1, 1, 1 * MiB, fragmentation=0.0),
        _alloc(2, 2, 2 * MiB, fragmentation=0.25),
        {
            "kind": "free",
            "time_ns": 3,
            "device": "CPU:0",
            "buffer_id": 1,
            "bytes": MiB,
            "fragmentation": 0.5,
        },
        {"kind": "sample", "time_ns": 4, "device": "CPU:0", "pool_bytes": 8 * MiB},
    ]
    analysis = analyze(load(make_trace(rows, {"framework": "tensorflow", "backend": "gpu"})))
    (device,) = analysis.devices
    assert device.peak.bytes == 3 * MiB
    assert device.headroom_bytes == round(0.25 * 5 * MiB)
    assert device.headroom_label == "measured"
    fit = {row.accelerator: row for row in analysis.fit.rows}
    needed = 3 * MiB + round(0.25 * 5 * MiB)
    assert fit["A100 80GB"].needed_bytes == needed
    assert fit["A100 80GB"].setting == f"memory_limit={-(-needed // MiB)} (MiB)"  # 5 MiB
    assert fit["TPU v4"].needed_bytes == needed  # no shapes: padding not counted
    assert any("padding not counted" in note for note in analysis.fit.notes)


def test_a_tpu_run_already_holds_its_padding(make_trace):
    rows = [_alloc(1, 1, 4_096_000, "[1000,1000]", "float32")]
    analysis = analyze(load(make_trace(rows, {"framework": "jax", "backend": "tpu"})))
    (device,) = analysis.devices
    assert device.padding.included and device.padding.extra_bytes == 0
    assert analysis.fit.rows[0].needed_bytes == 4_096_000
