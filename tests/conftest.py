from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tpumem.trace.writer import TraceWriter


def run_tpumem(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m tpumem ARGS` in its own process, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "tpumem", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit status 2 and one line on stderr, holding `words`; the line."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tpumem: error: ")
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def run_python(script: str, cwd: Path, env: dict[str, str] | None = None) -> dict:
    """Runs a framework script in a fresh interpreter; its last stdout line is JSON."""
    path = cwd / "script.py"
    path.write_text(script)
    result = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def make_trace(tmp_path: Path) -> Callable[..., Path]:
    """Writes a trace from row dicts: make_trace([{"kind": "alloc", ...}, ...])."""

    def make(rows: list[dict], metadata: dict | None = None, name: str = "t.tpumem") -> Path:
        path = tmp_path / name
        with TraceWriter(path, {"framework": "test", **(metadata or {})}) as writer:
            for row in rows:
                row = dict(row)
                writer.record(row.pop("kind"), **row)
        return path

    return make
