"""tpumem: device-memory profiler for JAX, TensorFlow and PyTorch/XLA programs."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from tpumem.trace.model import Trace


def load(path: str) -> Trace:
    """Loads a trace file (see tpumem.trace)."""
    from tpumem.trace.reader import load as _load

    return _load(path)


__all__ = ["__version__", "load"]
