"""tpumem's optional C code (an extension built beside the package where a compiler
is there; pyproject.toml): plain C with no Python API, loaded with ctypes, which
needs no Python headers to build and lets go of the GIL for each call."""

from __future__ import annotations

import ctypes
import importlib.util
import os
from collections.abc import Callable


def load(
    module: str, off_variable: str, declare: Callable[[ctypes.CDLL], None]
) -> ctypes.CDLL | None:
    """The library built as `module`, its functions declared; None where it was not
    built, or was built for another machine, damaged or from an older source that
    lacks a function (the Python path then does the work), or where the variable
    `off_variable` is set (to compare the two)."""
    if os.environ.get(off_variable):
        return None
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        return None
    try:
        library = ctypes.CDLL(spec.origin)
        declare(library)
    except (OSError, AttributeError):
        return None
    return library
