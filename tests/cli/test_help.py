"""The help reads well in an 80-column terminal: nothing wider, no Python type names
(`<bool>`, `<path>`) where a metavar belongs, no option name or summary cut short."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

COMMANDS = [
    "",
    "import",
    "report",
    "compare",
    "check",
    "profile",
    "export",
    "export tensorboard",
    "install-libtpu",
]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_fits_80_columns(command):
    result = subprocess.run(
        [sys.executable, "-m", "tpumem", *command.split(), "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "Usage: tpumem" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    assert not re.search(r"<(bool|str|int|float|path|list)[^>]*>", text), text
    _usage, rest = text.split("\n", 1)  # the usage line's "..." means "one or more"
    assert "…" not in text and "..." not in rest, text
