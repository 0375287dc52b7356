"""Running `tpumem profile` and plain python on a script, each in its own process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}  # TensorFlow's start-up chatter


def profile(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tpumem", "profile", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **QUIET, **(env or {})},
        timeout=300,
    )


def run_plain(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python ARGS`, without tpumem: what the profiled run must look like."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **QUIET, **(env or {})},
        timeout=300,
    )


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])
