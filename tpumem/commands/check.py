"""`tpumem check`: a run against limits, for CI."""

from __future__ import annotations

import sys
from pathlib import Path

from tpumem.commands.common import parse_capacity, parse_size
from tpumem.errors import TpumemError


def run_check(
    trace: Path,
    max_peak: str | None,
    max_fragmentation: float | None,
    capacity: str | None = None,
) -> int:
    """The exit status: 0 within the limits, 1 with a line per breach on stderr."""
    from tpumem.analysis import analyze
    from tpumem.check import Limits, breaches
    from tpumem.trace.reader import load

    if max_peak is None and max_fragmentation is None and capacity is None:
        raise TpumemError(
            "nothing to check: give --max-peak, --max-fragmentation and/or --capacity"
        )
    size = parse_capacity(capacity)
    peak_bytes = parse_size("--max-peak", max_peak)
    found = breaches(
        analyze(load(trace), capacity=size), Limits(peak_bytes, max_fragmentation, size)
    )
    for line in found:
        print(f"tpumem: breach: {line}", file=sys.stderr)
    if found:
        return 1
    print(f"{trace}: within the limits")
    return 0
