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
    from tpumem.adapters.base import memory_settings
    from tpumem.adapters.process_identity import from_environment, run_id_from_environment
    from tpumem.trace.metadata import SETTINGS_VARIABLES

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
        # (Where XLA dumped programs is a temporary directory, gone after the run.)
        "capture_options": {k: v for k, v in capture.items() if k != "xla_dump_dir"},
        "set_by_tpumem": environment,
        "env": {k: v for k, v in os.environ.items() if k in SETTINGS_VARIABLES},
        # (What the analysis needs to know of the framework's allocator.)
        "memory_settings": memory_settings(framework),
        "warnings": (),
    }
