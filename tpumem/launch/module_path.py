"""Where `python -m module` would find a module, without importing it.

(Which framework a script uses is not read from its source: the profiled process
records the one it imports, as it imports it: adapters/import_watch.py.)
"""

from __future__ import annotations

import sys
from pathlib import Path


def _local_file(name: str, directory: Path) -> Path | None:
    parts = [part for part in name.split(".") if part]
    if not parts:
        return None
    for candidate in (
        directory.joinpath(*parts).with_suffix(".py"),
        directory.joinpath(*parts, "__init__.py"),
    ):
        if candidate.is_file():
            return candidate
    return None


def module_file(module: str) -> Path | None:
    """Where `python -m module` would find the module, without importing it (its
    package's __init__ could import a framework into this process)."""
    for entry in ["", *sys.path]:
        base = Path(entry or ".")
        found = _local_file(module, base)
        if found is None:
            main = base.joinpath(*module.split("."), "__main__.py")
            found = main if main.is_file() else None
        if found is not None:
            return found
    return None
