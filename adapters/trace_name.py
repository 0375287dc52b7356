"""A trace the profiled process names itself, from placeholders ({host}, {rank},
{pid}; tpumem/outputs.py): created when the capture starts, renamed once the
framework says which process this is, where the rank was not known before."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

from tpumem.errors import TpumemError
from tpumem.outputs import create_trace_at, fill_placeholders, placeholders, rename_trace
from tpumem.trace.metadata import ProcessInfo


class TraceName:
    def __init__(
        self,
        pattern: str,
        force: bool,
        process: ProcessInfo | None,
        tell: Callable[[str], None] = lambda path: None,
    ) -> None:
        """`tell(path)`: where the trace is, each time it is named."""
        self._pattern, self._force, self._tell = pattern, force, tell
        self._waits_for_rank = "rank" in placeholders(pattern) and (
            process is None or process.index is None
        )
        self.path = self._name(process)
        self.descriptor = create_trace_at(self.path, force)
        tell(str(self.path))

    def _name(self, process: ProcessInfo | None) -> Path:
        rank = process.index if process is not None else None
        return fill_placeholders(self._pattern, platform.node(), rank, os.getpid())

    def settle(self, process: ProcessInfo) -> str | None:
        """The final name, now that the rank is known; what went wrong, if anything."""
        if not self._waits_for_rank or process.index is None:
            return None
        self._waits_for_rank = False
        final = self._name(process)
        try:
            rename_trace(self.path, final, self._force)
        except TpumemError as error:
            print(f"tpumem: {error}", file=sys.stderr)
            return str(error)
        self.path = final
        self._tell(str(final))
        return None
