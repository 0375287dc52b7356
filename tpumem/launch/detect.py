"""Which framework a script uses, read from its imports without running it.

The script's own imports are read, and those of the modules next to it that it
imports (a model file beside the training script), a few levels deep.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tpumem.errors import TpumemError

_MAX_FILES = 50  # local modules followed, at most
_MAX_BYTES = 16 << 20  # a source file larger than this is not read for its imports


def _imports(path: Path) -> set[str]:
    try:
        if not path.is_file() or path.stat().st_size > _MAX_BYTES:
            return set()
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level:
            # Relative: ".layers" for the module, ".layers.dense" in case it is one.
            module = "." * node.level + (node.module or "")
            joiner = "." if node.module else ""
            names.add(module)
            names.update(f"{module}{joiner}{alias.name}" for alias in node.names)
    return names


def _local_file(name: str, directory: Path) -> Path | None:
    level = len(name) - len(name.lstrip("."))
    for _ in range(max(level - 1, 0)):
        directory = directory.parent
    parts = [part for part in name.lstrip(".").split(".") if part]
    if not parts:
        return None
    for candidate in (
        directory.joinpath(*parts).with_suffix(".py"),
        directory.joinpath(*parts, "__init__.py"),
    ):
        if candidate.is_file():
            return candidate
    return None


def imported_modules(script: Path) -> set[str]:
    """Top-level names imported by the script and the local modules it imports."""
    found: set[str] = set()
    seen: set[Path] = set()
    pending = [script.resolve()]
    while pending and len(seen) < _MAX_FILES:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for name in _imports(path):
            local = _local_file(name, path.parent)
            if local is not None:
                pending.append(local.resolve())
            elif not name.startswith("."):
                found.add(name.split(".")[0])
    return found


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


def detect_framework(script: Path, frameworks: dict[str, str]) -> str:
    """The framework a script uses; `frameworks` maps import names to frameworks."""
    used = sorted({frameworks[name] for name in imported_modules(script) if name in frameworks})
    if len(used) == 1:
        return used[0]
    choices = ", ".join(sorted(set(frameworks.values())))
    if not used:
        raise TpumemError(
            f"{script}: imports none of the frameworks tpumem profiles; "
            f"name one with --framework ({choices})"
        )
    raise TpumemError(
        f"{script}: imports {' and '.join(used)}; choose one with --framework ({choices})"
    )
