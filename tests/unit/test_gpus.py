"""The GPUs `tpumem fit --gpu` knows, by the names users write, and what each
leaves PyTorch's allocator; its verdict's words."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpumem.analysis.gpus import (
    CUDA_CONTEXT_BYTES,
    EARLIER_WORKSPACE,
    HOPPER_WORKSPACE,
    GpuVerdict,
    gpu_named,
)
from tpumem.errors import TpumemError
from tpumem.report.gpu_fit_rows import sweep_largest, verdict_cell

DATA = Path(__file__).resolve().parent.parent / "data" / "torch_cuda"


@pytest.mark.parametrize(
    ("written", "name"),
    [
        ("H100-80GB", "H100 80GB"),
        ("h100", "H100 80GB"),
        ("A100 40GB", "A100 40GB"),
        ("H200", "H200"),
    ],
)
def test_names_as_users_write_them(written, name):
    assert gpu_named(written).name == name


def test_a_name_of_two_or_of_none_is_one_line():
    with pytest.raises(TpumemError, match=r"which one.*A100-40GB, A100-80GB"):
        gpu_named("a100")
    with pytest.raises(TpumemError, match="not a GPU tpumem knows; give one of"):
        gpu_named("v100")


def test_what_pytorch_can_have_is_the_recorded_h200s_less_its_context():
    """The context is what the recorded OOM's figures leave outside PyTorch."""
    oom = json.loads((DATA / "oom.json").read_text())
    used = oom["device_total_bytes"] - oom["observer"]["device_free"]
    assert used - oom["memory_reserved"] == CUDA_CONTEXT_BYTES
    h200 = gpu_named("H200")
    assert h200.memory_bytes == oom["device_total_bytes"]
    assert h200.usable_bytes == h200.memory_bytes - CUDA_CONTEXT_BYTES
    assert h200.workspace_bytes == HOPPER_WORKSPACE == 32 << 20
    assert gpu_named("A100-80GB").workspace_bytes == EARLIER_WORKSPACE


def _verdict(fits: bool, reserved: int | None = None, needs: int | None = None) -> GpuVerdict:
    return GpuVerdict(
        "H100 80GB", 10 << 30, 8 << 30, reserved, fits, needs, "1.0 GiB asked at t.py:3"
    )


def test_verdict_words():
    assert verdict_cell(_verdict(True, reserved=9 << 30)) == "fits: 1.0 GiB to spare"
    assert verdict_cell(_verdict(False, needs=12 << 30)) == (
        "out of memory: 1.0 GiB asked at t.py:3; needs 12.0 GiB of PyTorch's (a GPU of 12.7 GiB)"
    )
    rows = [("8", [_verdict(True, reserved=9 << 30)]), ("16", [_verdict(False)]), ("32", None)]
    assert sweep_largest("batch", rows, ["H100 80GB"]) == [
        "H100 80GB: the largest --batch that fits is 8"
    ]
    assert sweep_largest("batch", rows[1:], ["H100 80GB"]) == [
        "H100 80GB: no value of --batch given fits"
    ]
    # Given out of order, the largest is the largest number, not the last given.
    unordered = [("32", [_verdict(False)]), ("16", rows[0][1]), ("8", rows[0][1])]
    assert sweep_largest("batch", unordered, ["H100 80GB"]) == [
        "H100 80GB: the largest --batch that fits is 16"
    ]
