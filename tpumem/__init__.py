"""tpumem: device-memory profiler for JAX, TensorFlow and PyTorch/XLA programs."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from tpumem.trace.model import Trace
    from tpumem.tracking import Tracker


def load(path: str) -> Trace:
    """Loads a trace file (see tpumem.trace)."""
    from tpumem.trace.reader import load as _load

    return _load(path)


def track(
    output: str | None = None,
    *,
    framework: str | None = None,
    force: bool = False,
    programs: bool = True,
) -> Tracker:
    """Records device memory while a block runs (tpumem/tracking.py):
    `with tpumem.track("step.tpumem") as run: ...`, then `run.report()`."""
    from tpumem.tracking import track as _track

    return _track(output, framework=framework, force=force, programs=programs)


__all__ = ["__version__", "load", "track"]
