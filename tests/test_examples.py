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

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
FRAMEWORKS = {"tensorflow": "tf", "jax": "jax", "torch_xla": "torch_xla"}


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
    for framework, prefix in FRAMEWORKS.items():
        printed = run_example(prefix, model)
        assert printed["framework"] == framework
        assert printed["params"] == expected
        # The first step's loss is taken before any update: with weights drawn
        # from N(0, 0.02) the logits are near zero, so it is close to log(outputs).
        assert printed["loss"] == pytest.approx(math.log(outputs), abs=0.05), framework
