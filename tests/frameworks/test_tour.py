"""README.md's tour, and every command block of docs/, run as a new user runs
them: each `$` line in order, from a fresh directory holding the repository's
examples, with the environment's commands first on PATH and an 80-column
terminal's width; each line a block shows must be one the command printed, its
figures within the tolerance the page states (tests/doc_commands.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from doc_commands import ELIDED, mismatch, shown_commands

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_readme_and_the_docs_run_as_written(tmp_path):
    shutil.copytree(
        ROOT / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__")
    )
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "COLUMNS": "80",
    }
    ran, failures = 0, []
    for page in PAGES:
        for block in shown_commands(page):
            for shown in block:
                result = subprocess.run(
                    ["bash", "-c", shown.command],
                    cwd=tmp_path,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
                ran += 1
                printed = (result.stdout + result.stderr).splitlines()
                if result.returncode not in (0, 1):  # (1: an out-of-memory run, a breach)
                    failures.append(f"{shown.where}: exit status {result.returncode}")
                    failures += printed[-20:]
                    continue
                for line in shown.output:
                    why = None if line == ELIDED else mismatch(line, printed, shown.tolerance)
                    if why is not None:
                        failures.append(f"{shown.where}: {why}")
    assert ran >= 10  # (the tour is there)
    assert failures == [], "\n".join(failures)
