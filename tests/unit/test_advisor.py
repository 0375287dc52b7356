"""TPU padding, fragmentation headroom and the fit advisor on hand-built traces,
with answers worked out by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sample_traces import MiB
from tpumem.analysis import analyze
from tpumem.hlo.tiles import element_bits, parse_shape, tiled_bytes
from tpumem.report.fit_rows import fit_note
from tpumem.trace.reader import load

GiB = 1 << 30


LAYOUTS = json.loads((Path(__file__).parent.parent / "data" / "tpu_layouts.json").read_text())[
    "records"
]


@pytest.mark.parametrize(
    "record", LAYOUTS, ids=lambda r: r["name"] or f"{r['dtype']}{r['shape']}".replace(" ", "")
)
def test_padding_is_what_xla_tpu_lays_out(record):
    """Conv kernels, embeddings, attention, 1-D buffers and 240 random shapes:
    the estimate equals the bytes XLA:TPU itself gave each array on v4, v5e,
    v5p and v6e (libtpu's ahead-of-time compiles, tests/tools/record_tpu_layouts.py)."""
    size = tiled_bytes(tuple(record["shape"]), element_bits(record["dtype"]))
    assert set(record["bytes"].values()) == {size.best}
    assert size.plain <= size.best <= size.row_major


def test_a_conv_kernel_is_laid_out_with_its_features_minor():
    # PyTorch's [Cout, Cin, 3, 3] written row-major would pad 3x3 to 4x128 (57x);
    # XLA puts Cin and Cout minor: no padding at all.
    size = tiled_bytes((256, 128, 3, 3), 32)
    assert size.best == size.plain == 256 * 128 * 9 * 4
    assert size.row_major == 256 * 128 * 4 * 128 * 4
    # [1000, 1000] f32 occupies [1000, 1024] either way.
    assert (
        tiled_bytes((1000, 1000), 32).best == tiled_bytes((1000, 1000), 32).row_major == 4_096_000
    )


def test_a_conv_stack_is_not_dwarfed_by_its_padding(make_trace):
    """A ResNet-like stack of PyTorch conv kernels (OIHW), their gradients and
    Adam's two moments: the estimate stays small; row-major is kept as a bound."""
    kernels = [(64, 3, 7, 7), (64, 64, 3, 3), (128, 64, 3, 3), (256, 128, 3, 3), (512, 256, 1, 1)]
    rows = []
    for _ in range(4):  # parameter, gradient, two optimizer moments
        for dims in kernels:
            shape = "[" + ",".join(map(str, dims)) + "]"
            rows.append(_alloc(len(rows) + 1, len(rows) + 1, 4 * math.prod(dims), shape, "float32"))
    analysis = analyze(load(make_trace(rows, {"framework": "torch_xla", "backend": "cpu"})))
    (device,) = analysis.devices
    padding = device.padding
    assert padding.counted_bytes == device.peak.bytes
    # Only two kernels pad, four copies each: [64,3,7,7] takes 86,016 B for
    # 37,632 (Cin = 3 in 4 sublanes), [64,64,3,3] 294,912 for 147,456 (64 lanes of 128).
    assert padding.extra_bytes == 4 * (86_016 - 37_632) + 4 * (294_912 - 147_456)
    assert padding.extra_bytes < 0.1 * device.peak.bytes and not padding.large
    assert padding.row_major_extra_bytes > 30 * device.peak.bytes  # what the old estimate said
    assert [(s.shape, s.count) for s in padding.largest] == [("[64,64,3,3]", 4), ("[64,3,7,7]", 4)]
    assert analysis.fit.rows[1].fits  # TPU v5e


def test_a_padding_estimate_out_of_proportion_is_called_out(make_trace):
    # Ten thousand 3-element vectors: each takes a 128-element tile on a TPU.
    rows = [_alloc(i + 1, i + 1, 12, "[3]", "float32") for i in range(10_000)]
    analysis = analyze(load(make_trace(rows, {"framework": "jax", "backend": "cpu"})))
    (device,) = analysis.devices
    assert device.padding.extra_bytes == 10_000 * (512 - 12)
    assert device.padding.large
    note = next(n for n in map(fit_note, analysis.fit.notes) if "TPU padding estimate" in n)
    assert "[3] float32" in note and "10,000" in note


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
    # [1000,1000] f32 -> [1000,1024]: +96,000; [10,100] bf16 -> [16,128]: +2,096;
    # [25] f32 -> one 128-element tile: +412.
    assert device.padding.extra_bytes == 96_000 + 2_096 + 412
    assert device.padding.label == "estimated"
    assert device.padding.uncounted_bytes == big
    # The BFC model's pool holds two regions, each with a free tail: the smaller
    # tail is the headroom (fragmentation x free bytes).
    pre, frag = device.preallocation, device.fragmentation
    room = round(frag.at_peak * (pre.pool_at_peak_bytes - peak))
    assert 0 < device.headroom_bytes == room < 8 * MiB
    fit = {row.accelerator: row for row in analysis.fit.rows}
    assert fit["TPU v5e"].needed_bytes == peak + room + 98_508
    assert not fit["TPU v5e"].fits  # 16 GiB
    assert fit["TPU v5p"].fits and fit["TPU v5p"].setting is None
    assert fit["A100 40GB"].needed_bytes == peak + room  # no TPU padding on a GPU
    # 17.0037 GiB of CUDA's 39.38 GiB is 0.4318: the smallest fraction that holds
    # it is 0.44.
    assert fit["A100 40GB"].setting == "XLA_CLIENT_MEM_FRACTION=0.44"
    assert fit["H200"].share == pytest.approx((peak + room) / 150_109_880_320)


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
    assert any("padding not counted" in note for note in map(fit_note, analysis.fit.notes))


def test_a_tpu_run_already_holds_its_padding(make_trace):
    rows = [_alloc(1, 1, 4_096_000, "[1000,1000]", "float32")]
    analysis = analyze(load(make_trace(rows, {"framework": "jax", "backend": "tpu"})))
    (device,) = analysis.devices
    assert device.padding.included and device.padding.extra_bytes == 0
    assert analysis.fit.rows[0].needed_bytes == 4_096_000


def test_two_slices_of_one_generation_are_two_verdicts():
    """`--tpu v5e:1x1 --tpu v5e-8`: a row each, the refusal kept beside the fit."""
    from tpumem.analysis.advisor import with_tpu_compiles
    from tpumem.analysis.compiled.tpu import TpuFit, TpuTarget

    def target(topology: str, need: int) -> TpuTarget:
        usable = 15 * GiB
        chip = TpuFit("jit_step", True, need, 0, "", need, usable, "measured", need <= usable)
        return TpuTarget(topology, "TPU v5 lite", (), (), {}, 1.0, fit=chip)

    fit = with_tpu_compiles(None, (target("v5e:1x1", 20 * GiB), target("v5e:2x4", 4 * GiB)))
    assert fit is not None
    rows = [(r.compiled_for, r.fits) for r in fit.rows]
    assert rows == [("v5e:1x1", False), ("v5e:2x4", True)]
