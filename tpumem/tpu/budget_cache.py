"""XLA:TPU's budget per chip (adapters/tpu_budget.py measures it in about 15
compiles), kept between runs by libtpu release and TPU generation: a release
decides the same budget for a generation every time, so it is measured once.

The cache is a small JSON file under $XDG_CACHE_HOME/tpumem (~/.cache/tpumem);
one that cannot be read or written is as if empty (the budget is measured again).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path

from tpumem.trace.records import parse_object


def cache_file() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tpumem" / "tpu-budgets.json"


def _key(libtpu: str, generation: str) -> str:
    return f"libtpu {libtpu} {generation}"


def _read() -> dict:
    try:
        return parse_object(cache_file().read_text(errors="replace")) or {}
    except OSError:
        return {}


def cached_budget(libtpu: str, generation: str) -> int | None:
    if not libtpu:
        return None  # a libtpu of no known release: measured each time
    value = _read().get(_key(libtpu, generation))
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def remember_budget(libtpu: str, generation: str, usable_bytes: int) -> None:
    if not libtpu:
        return
    known = _read()
    known[_key(libtpu, generation)] = usable_bytes
    path = cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Whole or not at all: another compile may read it meanwhile.
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as handle:
            json.dump(known, handle, indent=1, sort_keys=True)
    except OSError:
        return  # (kept nowhere: measured again next time)
    try:
        os.replace(handle.name, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(handle.name)
