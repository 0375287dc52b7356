"""Will it fit on a TPU slice, the pure parts: slices by their Cloud names,
XLA:TPU's refusals read from its messages, the run's need per chip and the
verdict against XLA:TPU's budget, and the budget's cache. (Against libtpu
itself: test_tpu_verdict_real.py.)"""

from __future__ import annotations

import pytest

from tpumem.analysis import provenance
from tpumem.analysis.compiled.tpu import TpuProgram, TpuRefused, TpuTarget, tpu_fit, tpu_targets
from tpumem.errors import TpumemError
from tpumem.hlo.refusals import VMEM, Figure, refusal
from tpumem.tpu.budget_cache import cache_file, cached_budget, remember_budget
from tpumem.tpu.topology import diagnostic_topology, parse_topology
from tpumem.trace.tpu_rows import TpuBudget, TpuCompile, budget_row_text, read_tpu_row

GiB = 1 << 30

# XLA:TPU's two forms (libtpu 0.0.42.1 prints both: the first far over the budget,
# the second near it, with the largest allocations after it).
FAR = (
    "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO "
    "temporaries (21.56G) exceeds available HBM (15.75G)."
)
NEAR = (
    "RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: XLA:TPU compile permanent error. Ran out "
    "of memory in memory space hbm. Used 15.75G of 15.75G hbm. Exceeded hbm capacity by "
    "34.0K.\n\nTotal hbm usage >= 16.00G:\n    reserved        258.00M \n"
)


@pytest.mark.parametrize(
    "name, libtpu",
    [
        ("v5e-1", "v5e:1x1"),
        ("v5e-8", "v5e:2x4"),
        ("v5litepod-16", "v5e:4x4"),
        ("v6e-256", "v6e:16x16"),
        ("v4-8", "v4:2x2x1"),  # v4 and v5p count TensorCores: two a chip
        ("v5p-8", "v5p:2x2x1"),
        ("v5p-16", "v5p:2x2x2"),
        ("v5p-64", "v5p:2x4x4"),
        ("v5p-128", "v5p:4x4x4"),
        ("V5P-1024", "v5p:8x8x8"),
        ("v5e:2x4", "v5e:2x4"),
    ],
)
def test_a_cloud_slice_is_the_topology_libtpu_names(name, libtpu):
    assert parse_topology(name).name == libtpu


@pytest.mark.parametrize("name", ["v5e-2", "v6e-512", "v5p-4", "v5p-12", "v4-6", "v7-8"])
def test_a_slice_cloud_tpu_does_not_offer_is_refused(name):
    with pytest.raises(TpumemError, match="--tpu"):
        parse_topology(name)


def test_xla_tpus_refusals_are_read_with_their_rounding():
    far = refusal(FAR)
    assert far is not None and far.needed is not None and far.available is not None
    assert far.needed.bytes == round(21.56 * GiB) and far.available.bytes == round(15.75 * GiB)
    assert far.available.rounding_bytes == round(0.005 * GiB)
    # No overshoot said: needed - available, its rounding both figures'.
    assert far.over == Figure(far.needed.bytes - far.available.bytes, 2 * round(0.005 * GiB))
    near = refusal(NEAR)
    assert near is not None and near.over == Figure(round(34.0 * 1024), round(0.05 * 1024))
    assert refusal("INVALID_ARGUMENT: the shapes do not match") is None
    assert refusal("RESOURCE_EXHAUSTED: out of host memory") is None


def test_a_kernel_refused_for_on_chip_vmem_is_a_refusal_in_that_space():
    """libtpu 0.0.42.1's two forms for a Pallas block too large for VMEM."""
    exact = refusal(
        "RESOURCE_EXHAUSTED: Allocation (size=268435456) would exceed memory "
        "(size=134217728) :: #allocation2 [shape = 'u8[268435456]{0}', space=vmem, "
        "size = 0x10000000, scoped, tag = 'input window allocation']"
    )
    assert exact is not None and exact.space == VMEM
    assert exact.needed == Figure(256 << 20, 0) and exact.available == Figure(128 << 20, 0)
    assert exact.over == Figure(128 << 20, 0)
    rounded = refusal(
        "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory "
        "space vmem. Used 256.00M of 128.00M vmem."
    )
    assert rounded is not None and rounded.space == VMEM
    assert rounded.needed is not None and rounded.needed.bytes == 256 << 20
    assert refusal(FAR) is not None and refusal(FAR).space == "hbm"  # type: ignore[union-attr]


def _program(need: int, name: str = "jit_step") -> TpuProgram:
    compiled = TpuCompile(
        "v5e:1x1", 1, name, 1, memory={"argument_bytes": need - 100, "generated_code_bytes": 100}
    )
    return TpuProgram(compiled, None)


def _target(*needs: int, budget: int | None = 15 * GiB, refused: str | None = None) -> TpuTarget:
    programs = tuple(_program(n, f"jit_{i}") for i, n in enumerate(sorted(needs, reverse=True)))

    refusals = ()
    if refused is not None:
        said = refusal(refused)
        assert said is not None
        refusals = (TpuRefused(TpuCompile("v5e:1x1", 9, "jit_big", 1, error=refused), said),)
    return TpuTarget(
        topology="v5e:1x1",
        device_kind="TPU v5 lite",
        programs=programs,
        failed=(),
        layouts={},
        seconds=1.0,
        refused=refusals,
        budget=None if budget is None else TpuBudget("v5e:1x1", budget, "0.0.42.1"),
    )


def test_the_need_is_never_below_a_programs_own():
    target = _target(8 * GiB, 2 * GiB)
    # 4 MiB live at the peak, no program running then: still the largest program's need.
    fit = tpu_fit(target, 4 << 20, (), ())
    assert fit is not None and fit.need_bytes == 8 * GiB and fit.program == "jit_0"
    assert fit.fits and fit.spare_bytes == 7 * GiB
    assert fit.usable_label == provenance.MEASURED
    # More live outside than that: the arrays and the largest program's working memory.
    fit = tpu_fit(target, 15 * GiB, (), ())
    assert fit is not None and fit.need_bytes == 15 * GiB + 100 and not fit.fits


def test_the_verdict_flips_at_the_budget_to_the_byte():
    assert tpu_fit(_target(15 * GiB), 0, (), ()).fits
    over = tpu_fit(_target(15 * GiB + 1), 0, (), ())
    assert not over.fits and over.spare_bytes == -1


def test_without_a_measured_budget_the_datasheet_is_used_and_said():
    fit = tpu_fit(_target(15 * GiB, budget=None), 0, (), ())
    assert fit.usable_bytes == 16 * GiB and fit.usable_label == provenance.DATASHEET and fit.fits


def test_a_refused_program_does_not_fit_by_xla_tpus_own_figures():
    target = _target(1 * GiB, refused=FAR)
    fit = tpu_fit(target, 0, (), ())
    assert fit is not None and not fit.fits and fit.refused == "jit_big"
    assert fit.need_bytes == round(21.56 * GiB)  # as XLA:TPU says it
    # Where XLA:TPU says only its overshoot: past the budget by that much.
    fit = tpu_fit(_target(refused=NEAR), 0, (), ())
    assert fit is not None and fit.need_bytes == round(15.75 * GiB)  # "Used 15.75G"


def test_a_budget_row_reads_back_and_a_bad_one_is_none():
    row = TpuBudget("v5e:2x4", 16_909_336_064, "0.0.42.1", "TPU v5 lite", 2.5)
    assert read_tpu_row(budget_row_text(row)) == row
    assert read_tpu_row('{"topology": "v5e:1x1", "budget": {"usable_bytes": -1}}') is None
    assert read_tpu_row('{"topology": "v5e:1x1", "budget": {"usable_bytes": "16G"}}') is None


def test_the_budget_cache_keeps_a_release_and_generation_and_survives_damage(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cached_budget("0.0.42.1", "v5e") is None
    remember_budget("0.0.42.1", "v5e", 16_909_336_064)
    remember_budget("0.0.42.1", "v5p", 102_803_437_568)
    assert cached_budget("0.0.42.1", "v5e") == 16_909_336_064
    assert cached_budget("0.0.43", "v5e") is None  # another release decides anew
    assert cached_budget("", "v5e") is None  # a release unknown: never cached
    cache_file().write_bytes(b"\x00{not json")
    assert cached_budget("0.0.42.1", "v5e") is None
    remember_budget("0.0.42.1", "v5e", 1)  # a damaged cache is replaced whole
    assert cached_budget("0.0.42.1", "v5e") == 1


def test_a_trace_without_tpu_rows_has_no_targets(make_trace):
    from tpumem.trace.reader import load

    assert tpu_targets(load(make_trace([]))) == ()


def test_a_sweep_sets_the_scripts_argument_where_it_is_or_adds_it():
    from tpumem.commands.fit_sweep import with_argument

    assert with_argument(("--batch", "8", "--seq", "2"), "batch", "16") == (
        "--batch",
        "16",
        "--seq",
        "2",
    )
    assert with_argument(("--batch=8",), "batch", "16") == ("--batch=16",)
    assert with_argument(("--seq", "2"), "batch", "16") == ("--seq", "2", "--batch", "16")


def test_the_largest_value_that_fits_is_the_largest_number_not_the_last():
    from dataclasses import replace

    from tpumem.analysis.compiled.sweep import SweepPoint
    from tpumem.report.sweep_tables import sweep_largest

    fits, over = (replace(t, fit=tpu_fit(t, 0, (), ())) for t in (_target(GiB), _target(16 * GiB)))
    points = [
        SweepPoint(("64",), {"v5e:1x1": over}),
        SweepPoint(("8",), {"v5e:1x1": fits}),
        SweepPoint(("32",), {"v5e:1x1": fits}),
    ]
    assert sweep_largest(("batch",), ["v5e:1x1"], points) == [
        "v5e:1x1: the largest --batch that fits is 32"
    ]
    assert sweep_largest(("batch",), ["v5e:1x1"], points[:1]) == [
        "v5e:1x1: no value of --batch given fits"
    ]


def test_the_frontier_gives_per_policy_the_largest_batch_and_the_next_that_does_not():
    from dataclasses import replace

    from tpumem.analysis.compiled.sweep import SweepPoint
    from tpumem.report.sweep_tables import frontier_table

    fits, over = (replace(t, fit=tpu_fit(t, 0, (), ())) for t in (_target(GiB), _target(16 * GiB)))
    on = "v5e:1x1"
    points = [
        SweepPoint(("16", "none"), {on: fits}),
        SweepPoint(("32", "none"), {on: over}),
        SweepPoint(("64", "none"), {}, {on: "--batch 32 did not fit"}),
        SweepPoint(("16", "full"), {on: fits}),
        SweepPoint(("32", "full"), {on: fits}),
        SweepPoint(("64", "full"), {on: fits}),
        SweepPoint(("16", "dots"), {on: over}),
    ]
    title, headers, rows = frontier_table(("batch", "remat"), [on], points)
    assert headers == ("remat", on) and "--batch" in title and "--remat" in title
    assert rows == [
        ("none", "16 (1.00 GiB); 32 does not fit"),
        ("full", "64 (1.00 GiB), the largest given"),
        ("dots", "none given fits"),
    ]


def test_a_program_not_compiled_for_another_reason_leaves_the_answer_unknown():
    from dataclasses import replace

    from tpumem.report.tpu_tables import tpu_verdict

    failed = TpuCompile("v5e:1x1", 3, "jit_eval", 1, error="UNIMPLEMENTED: a CPU custom call")
    target = replace(_target(1 * GiB), failed=(failed,))
    fit = tpu_fit(target, 0, (), ())
    assert fit is not None and not fit.fits and fit.not_compiled == 1
    assert (tpu_verdict(replace(target, fit=fit)) or "").startswith("NOT KNOWN on v5e:1x1")


def test_a_refused_program_is_planned_on_as_many_chips_of_the_largest_generation():
    """The diagnostic compile's slice: v5p chips (95 GiB), as many as refused it;
    none where the refusing slice is v5p's or no v5p slice has that many chips."""
    assert diagnostic_topology(1, "v5e") == parse_topology("v5p:1x1x1")
    assert diagnostic_topology(8, "v5e") == parse_topology("v5p:2x2x2")
    assert diagnostic_topology(256, "v6e") == parse_topology("v5p-512")
    assert diagnostic_topology(8, "v5p") is None
    assert diagnostic_topology(6, "v5e") is None
    assert diagnostic_topology(16384, "v4") is None


def test_a_diagnostic_plan_keeps_its_topology_in_the_trace():
    from tpumem.trace.tpu_rows import compile_row_text

    row = TpuCompile(
        "v5e:2x4", 3, "jit_step", 8, error="RESOURCE_EXHAUSTED", diagnostic="v5p:2x2x2"
    )
    assert read_tpu_row(compile_row_text(row)) == row
    assert (
        read_tpu_row(compile_row_text(TpuCompile("v5e:2x4", 3, "jit_step", 8))).diagnostic is None
    )


def test_a_refusal_written_before_its_diagnosis_is_replaced_by_it():
    """The refusal's row comes first (a diagnostic compile may die); a later row
    with the diagnosis takes its place, and a refusal without one stands."""
    from tpumem.analysis.compiled.tpu import _diagnosed

    refused = TpuCompile("v5e:2x4", 3, "jit_step", 8, error="RESOURCE_EXHAUSTED: ...")
    other = TpuCompile("v5e:2x4", 4, "jit_init", 8, error="RESOURCE_EXHAUSTED: ...")
    fine = TpuCompile("v5e:2x4", 5, "jit_eval", 8, memory={"argument_bytes": 1})
    diagnosis = TpuCompile(
        "v5e:2x4", 3, "jit_step", 8, error="RESOURCE_EXHAUSTED: ...", diagnostic="v5p:2x2x2"
    )
    assert _diagnosed([refused, other, fine, diagnosis]) == [diagnosis, other, fine]
    assert _diagnosed([refused, other]) == [refused, other]


def test_a_recompute_cost_is_given_only_where_the_change_keeps_batch_and_sharding():
    from tpumem.analysis.changes import _recompute_cost
    from tpumem.analysis.compiled.tpu import TpuCandidate
    from tpumem.trace.tpu_rows import RECOMPUTED, SHARDED_OVER

    refused = TpuCompile("v5e:1x1", 2, "jit_step", 1, error="RESOURCE_EXHAUSTED", flops=6e12)

    def candidate(words: str, flops: float | None = 7e12) -> TpuCandidate:
        row = TpuCompile("v5e:1x1", 3, "jit_step", 1, change=words, change_of=2, flops=flops)
        return TpuCandidate(row, None)

    remat = f"donated; each step of the scan at s.py:3 {RECOMPUTED} (jax.checkpoint)"
    assert _recompute_cost(candidate(remat), refused) == (7e12, 6e12)
    for other in (f"{remat}; batch 8, not 16", f"params {SHARDED_OVER} 8 chips; {remat}"):
        assert _recompute_cost(candidate(other), refused) == (None, None)  # (they change it too)
    assert _recompute_cost(candidate("donated (jax.jit(...))"), refused) == (None, None)
    assert _recompute_cost(candidate(remat, None), refused) == (None, None)


def test_a_compile_rows_operation_count_is_kept_and_a_bad_one_read_as_none():
    from tpumem.trace.tpu_rows import compile_row_text

    row = TpuCompile("v5e:1x1", 1, "jit_step", 1, flops=1.5e12)
    assert read_tpu_row(compile_row_text(row)) == row
    for bad in ("-1", "1e999", "true", '"many"'):
        text = compile_row_text(row).replace('"flops": 1500000000000.0', f'"flops": {bad}')
        read = read_tpu_row(text)
        assert read is not None and read.flops is None
