"""What a notebook shows for tpumem's values (a run's analysis, a comparison):
their reports, HTML and text. The analysis knows nothing of reports (the floors
import downwards only: tests/cli/test_imports.py); IPython is told instead, by type
name, so that nothing is imported until a value is shown.

Registered when tpumem is imported inside IPython, and by `%load_ext tpumem`.
Imports nothing of IPython's itself."""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

# (module, class, the function of tpumem/report/notebook_bundles.py that shows it)
SHOWN = (
    ("tpumem.analysis.trace_figures", "TraceAnalysis", "run_bundle"),
    ("tpumem.analysis.comparison", "Comparison", "comparison_bundle"),
)


def register(shell: Any) -> None:
    """Tells IPython's shell how to show tpumem's values."""
    formatter = shell.display_formatter.mimebundle_formatter
    for module, name, shown_by in SHOWN:
        formatter.for_type_by_name(module, name, partial(bundle, shown_by))


def register_if_in_ipython() -> None:
    """register() with the running IPython shell, if tpumem runs inside one."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is not None:
        register(shell)


def bundle(shown_by: str, value: Any, include: object = None, exclude: object = None) -> dict:
    """The HTML and text reports of `value`, as IPython asks for them."""
    from tpumem.report import notebook_bundles

    return getattr(notebook_bundles, shown_by)(value)
