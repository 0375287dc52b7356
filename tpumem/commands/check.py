"""`tpumem check`: a run against limits, for CI."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from tpumem.commands.options import parse_capacity, parse_size
from tpumem.errors import TpumemError
from tpumem.progress import progress
from tpumem.reading.paths import opened_traces


def run_check(
    paths: list[Path],
    max_peak: str | None,
    max_fragmentation: float | None,
    capacity: str | None = None,
    max_growth: str | None = None,
    baseline: Path | None = None,
    max_increase: str | None = None,
    max_imbalance: str | None = None,
) -> int:
    """The exit status: 0 within the limits, 1 with a line per breach on stderr."""
    from tpumem.analysis import analyze
    from tpumem.commands.limits import Limits, breaches
    from tpumem.trace.reader import load

    if max_increase is not None and baseline is None:
        raise TpumemError("--max-increase: give the run it is measured from with --baseline")
    size = parse_capacity(capacity)
    limits = Limits(
        max_peak_bytes=parse_size("--max-peak", max_peak),
        max_fragmentation=max_fragmentation,
        capacity_bytes=size,
        max_growth_bytes=parse_size("--max-growth", max_growth),
        max_increase=_share_or_size("--max-increase", max_increase),
    )
    imbalance = _share_or_size("--max-imbalance", max_imbalance) if max_imbalance else None
    if not limits.any() and baseline is None and imbalance is None:
        raise TpumemError(
            "nothing to check: give --max-peak, --max-fragmentation, --capacity, "
            "--max-growth, --max-imbalance and/or --baseline"
        )
    with opened_traces(paths) as (traces, where, is_run, shown_as):
        if is_run:
            if baseline is not None:
                raise TpumemError("--baseline compares one trace with another: give one process's")
            found = _run_breaches(traces, where, limits, imbalance)
        else:
            if imbalance is not None:
                raise TpumemError(
                    "--max-imbalance compares the processes of a run: give its directory or traces"
                )
            run = analyze(load(traces[0], shown_as), capacity=size)
            if baseline is not None:
                limits = replace(limits, baseline=analyze(load(baseline)))
            found = breaches(run, limits)
    from tpumem.report.visible import visible

    for line in found:  # (names from the traces: their control characters shown escaped)
        print(f"tpumem: breach: {visible(line)}", file=sys.stderr)
    if found:
        return 1
    print(f"{where}: within the limits")
    return 0


def _run_breaches(traces: list[Path], where: str, limits, imbalance) -> list[str]:
    """Every process against the limits, and the spread of their peaks."""
    from functools import partial

    from tpumem.commands.limits import breaches, imbalance_breaches
    from tpumem.reading.many_traces import analyze_processes

    per_process = partial(breaches, limits=limits) if limits.any() else None
    with progress(f"analysing {len(traces):,} traces of {where}"):
        run = analyze_processes(traces, capacity=limits.capacity_bytes, per_process=per_process)
    found = [f"{p.name} ({p.path}): {line}" for p in run.processes for line in p.findings]
    found += [f"left out {path}: {why}" for path, why in run.unreadable]
    if imbalance is not None:
        found += imbalance_breaches(run, imbalance)
    return found


def _share_or_size(option: str, text: str | None):
    """A share ("5%") or a size ("64MiB"); 0 when not given."""
    from tpumem.commands.limits import Increase

    if text is None:
        return Increase(share=0.0)
    if text.strip().endswith("%"):
        try:
            share = float(text.strip()[:-1]) / 100
        except ValueError:
            share = -1.0
        if not 0 <= share < float("inf"):
            raise TpumemError(f"{option}: {text!r} is not a share such as 5%")
        return Increase(share=share)
    return Increase(bytes=parse_size(option, text))
