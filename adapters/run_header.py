"""The trace's header for a run recorded in this process: what ran, where, with
which settings (the profiled process's, `tpumem.track`'s and --follow's)."""

from __future__ import annotations

import os
import platform
from typing import Any


def run_metadata(
    framework: str,
    source: str,
    command: list[str],
    capture: dict[str, Any],
    environment: dict[str, str],
) -> dict[str, Any]:
    """The trace's header for a run recorded in this process."""
    from tpumem import __version__
    from tpumem.adapters.base import declared as declared_framework
    from tpumem.adapters.process_identity import from_environment, run_id_from_environment
    from tpumem.trace.metadata import SETTINGS_VARIABLES

    facts = declared_framework(framework)
    settings = None if facts is None else facts.memory_settings
    # The variables the framework's allocator reads, as it declared them, are
    # recorded beside the common ones: the analysis reads them there.
    declared = set(SETTINGS_VARIABLES)
    if settings is not None:
        declared.add(settings.fraction_variable or "")
        declared.update(g.name for g in settings.growth_settings if not g.name_ends)
    return {
        "framework": framework,
        "source": source,
        "command": tuple(command),
        "cwd": os.getcwd(),
        "host": platform.node(),
        "pid": os.getpid(),
        "process": from_environment(os.environ),
        "run": run_id_from_environment(os.environ),
        "python": platform.python_version(),
        "tpumem_version": __version__,
        # (Figures and switches: where XLA dumped programs is a temporary directory,
        # gone after the run; a fit's GPU is the trace's device.)
        "capture_options": {k: v for k, v in capture.items() if isinstance(v, (bool, int, float))},
        "set_by_tpumem": environment,
        "env": {k: v for k, v in os.environ.items() if k in declared},
        "memory_settings": settings,
        "words": None if facts is None else facts.words,
        "warnings": (),
    }
