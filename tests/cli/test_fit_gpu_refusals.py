"""`tpumem fit --gpu`'s refusals: one line and exit status 2 before anything
runs (no framework is imported in this lane's processes)."""

from __future__ import annotations

import pytest

from conftest import run_tpumem


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--gpu", "H100", "--tpu", "v5e-8"), "give --tpu or --gpu, not both"),
        (("--gpu", "V100"), "not a GPU tpumem knows; give one of A100-40GB"),
        (("--gpu", "a100"), "which one? A100-40GB, A100-80GB"),
        (("--gpu", "H100", "--search"), "--search and --slices are for --tpu"),
        (("--gpu", "H100", "--slices", "2"), "--search and --slices are for --tpu"),
        (("--tpu", "v5e-8", "--steps", "2"), "--steps is for --gpu"),
        (("--gpu", "H100", "--sweep", "a=1,2", "--sweep", "b=3"), "one --sweep"),
        (("--gpu", "H100", "--steps", "0"), "Invalid value for '--steps'"),
    ],
)
def test_refused_in_one_line(tmp_path, args, said):
    (tmp_path / "train.py").write_text("import torch\n")
    result = run_tpumem("fit", *args, str(tmp_path / "train.py"), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert said in result.stderr
    assert "Traceback" not in result.stderr
    assert not list(tmp_path.glob("*.tpumem"))


def test_a_missing_script_is_one_line(tmp_path):
    result = run_tpumem("fit", "--gpu", "H200", str(tmp_path / "nothing.py"), cwd=tmp_path)
    assert result.returncode == 2
    assert "no such file" in result.stderr and "Traceback" not in result.stderr
