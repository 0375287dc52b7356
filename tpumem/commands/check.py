"""`tpumem check`: a run against limits, for CI."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from tpumem.commands.common import parse_capacity, parse_size
from tpumem.errors import TpumemError


def run_check(
    trace: Path,
    max_peak: str | None,
    max_fragmentation: float | None,
    capacity: str | None = None,
    max_growth: str | None = None,
    baseline: Path | None = None,
    max_increase: str | None = None,
) -> int:
    """The exit status: 0 within the limits, 1 with a line per breach on stderr."""
    from tpumem.analysis import analyze
    from tpumem.check import Limits, breaches
    from tpumem.trace.reader import load

    if max_increase is not None and baseline is None:
        raise TpumemError("--max-increase: give the run it is measured from with --baseline")
    size = parse_capacity(capacity)
    limits = Limits(
        max_peak_bytes=parse_size("--max-peak", max_peak),
        max_fragmentation=max_fragmentation,
        capacity_bytes=size,
        max_growth_bytes=parse_size("--max-growth", max_growth),
        max_increase=_increase(max_increase),
    )
    if not limits.any() and baseline is None:
        raise TpumemError(
            "nothing to check: give --max-peak, --max-fragmentation, --capacity, "
            "--max-growth and/or --baseline"
        )
    run = analyze(load(trace), capacity=size)
    if baseline is not None:
        limits = replace(limits, baseline=analyze(load(baseline)))
    found = breaches(run, limits)
    for line in found:
        print(f"tpumem: breach: {line}", file=sys.stderr)
    if found:
        return 1
    print(f"{trace}: within the limits")
    return 0


def _increase(text: str | None):
    """--max-increase: a share ("5%") or a size ("64MiB"); 0 when not given."""
    from tpumem.check import Increase

    if text is None:
        return Increase(share=0.0)
    if text.strip().endswith("%"):
        try:
            share = float(text.strip()[:-1]) / 100
        except ValueError:
            share = -1.0
        if not 0 <= share < float("inf"):
            raise TpumemError(f"--max-increase: {text!r} is not a share such as 5%")
        return Increase(share=share)
    return Increase(bytes=parse_size("--max-increase", text))
