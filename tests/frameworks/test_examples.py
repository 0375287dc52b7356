"""The reference models are the same in every framework (examples/model_config.py)."""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tpumem.adapters.import_watch import FRAMEWORKS

EXAMPLES = Path(__file__).resolve().parent.parent.parent / "examples"


def _prefixes(model: str) -> list[str]:
    # Every framework's example of the model (examples/<prefix>_<model>.py): a new
    # framework's join the check without a line here.
    return sorted(p.name[: -len(f"_{model}.py")] for p in EXAMPLES.glob(f"*_{model}.py"))


def run_example(prefix: str, model: str) -> dict:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{prefix}_{model}.py"), "--steps", "1"],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PJRT_DEVICE": "CPU"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_every_framework_builds_the_same_model(model):
    sys.path.insert(0, str(EXAMPLES))
    try:
        from model_config import DEFAULTS, parameter_count
    finally:
        sys.path.remove(str(EXAMPLES))
    expected = parameter_count(model, argparse.Namespace(**DEFAULTS[model]))
    outputs = DEFAULTS[model].get("vocab") or DEFAULTS[model]["classes"]

    printed_by = {}
    for prefix in _prefixes(model):
        printed = run_example(prefix, model)
        framework = printed["framework"]
        printed_by[framework] = prefix
        assert printed["params"] == expected
        # The first step's loss is taken before any update: with weights drawn
        # from N(0, 0.02) the logits are near zero, so it is close to log(outputs).
        assert printed["loss"] == pytest.approx(math.log(outputs), abs=0.05), framework
    # One example per framework tpumem has an adapter for, each its own.
    assert sorted(printed_by) == sorted(FRAMEWORKS), printed_by
