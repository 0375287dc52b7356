"""tpumem: device-memory profiler for JAX, TensorFlow and PyTorch/XLA programs."""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    from tpumem.analysis.comparison import Comparison
    from tpumem.analysis.trace_figures import TraceAnalysis
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
    summary: bool = True,
) -> Tracker:
    """Records device memory while a block runs (tpumem/tracking.py):
    `with tpumem.track("step.tpumem") as run: ...`, then `run.report()`."""
    from tpumem.tracking import track as _track

    return _track(output, framework=framework, force=force, programs=programs, summary=summary)


def compare(*runs: str | Tracker | TraceAnalysis) -> Comparison:
    """Runs side by side, as `tpumem compare` shows them: trace files, tracks
    (`tpumem.track`), or analyses. In a notebook the value shows the comparison."""
    from tpumem.tracking import compare_runs

    return compare_runs(runs)


def load_ipython_extension(ipython: object) -> None:
    """`%load_ext tpumem`: the `%%tpumem` and `%tpumem_report` magics."""
    from tpumem.notebook import load as _load

    _load(ipython)


# Inside IPython, tpumem's values show their reports (tpumem/notebook_display.py).
from tpumem.notebook_display import register_if_in_ipython  # noqa: E402

register_if_in_ipython()

__all__ = ["__version__", "compare", "load", "load_ipython_extension", "track"]
