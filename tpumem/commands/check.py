"""`tpumem check`: a run against limits, for CI."""

from __future__ import annotations

import sys
from dataclasses import replace

from tpumem.commands.limits import Limits
from tpumem.commands.options import NO_INCREASE, Increase
from tpumem.commands.requests import CheckRequest
from tpumem.commands.tpu_compiles import compile_for_tpus
from tpumem.errors import TpumemError
from tpumem.reading.paths import RunInput, opened_run


def run_check(request: CheckRequest) -> int:
    """The exit status: 0 within the limits, 1 with a line per breach on stderr."""
    from tpumem.commands.limits import breaches
    from tpumem.reading.analyses import analysed, analysed_one

    if request.max_increase is not None and request.baseline is None:
        raise TpumemError("--max-increase: give the run it is measured from with --baseline")
    limits = Limits(
        max_peak_bytes=request.max_peak_bytes,
        max_fragmentation=request.max_fragmentation,
        capacity_bytes=request.capacity,
        max_growth_bytes=request.max_growth_bytes,
        max_increase=request.max_increase or NO_INCREASE,
        tpu=tuple(t.name for t in request.tpu),
    )
    imbalance = request.max_imbalance
    if not limits.any() and request.baseline is None and imbalance is None and not limits.tpu:
        raise TpumemError(
            "nothing to check: give --max-peak, --max-fragmentation, --capacity, "
            "--max-growth, --max-imbalance, --tpu and/or --baseline"
        )
    trusted: str | None = None  # how many processes their summaries judged
    with opened_run(list(request.paths)) as given:
        compile_for_tpus(given.traces, request.tpu, quiet=True, stored=given.stored)
        if given.is_processes:
            if request.baseline is not None:
                raise TpumemError("--baseline compares one trace with another: give one process's")
            found, trusted = _run_breaches(given, limits, imbalance, request.trust_summaries)
        else:
            if imbalance is not None:
                raise TpumemError(
                    "--max-imbalance compares the processes of a run: give its directory or traces"
                )
            run = analysed(given.traces[0], given.shown_as, capacity=request.capacity)
            if request.baseline is not None:
                baseline = analysed_one(request.baseline, role="--baseline")
                limits = replace(limits, baseline=baseline)
            found = breaches(run, limits)
    from tpumem.report.escapes import visible

    for line in found:  # (names from the traces: their control characters shown escaped)
        print(f"tpumem: breach: {visible(line)}", file=sys.stderr)
    if found:
        if trusted is not None:
            print(f"tpumem: {trusted}", file=sys.stderr)
        return 1
    print(f"{given.where}: within the limits" + (f" ({trusted})" if trusted else ""))
    return 0


def _run_breaches(
    given: RunInput, limits: Limits, imbalance: Increase | None, trust_summaries: bool
) -> tuple[list[str], str | None]:
    """Every process against the limits, and the spread of their peaks (a process
    that ended out of memory breaks them, as one trace's does); and, where the
    summaries the recordings left judged processes, how many."""
    from functools import partial

    from tpumem.commands.analysed_runs import analysed_processes
    from tpumem.commands.limits import breach_findings, imbalance_breaches, summary_findings

    # A gate judges by the traces: a summary stands for its trace on its size and
    # the digest of its end, which anyone can compute, so a summary written by
    # hand (1000 B for a process of 320 KiB) would pass the run. Only where asked
    # do the summaries answer the limits on their figures; a capacity and the TPU
    # slices need each process's trace, read in full, either way.
    in_full = not trust_summaries or limits.capacity_bytes is not None or bool(limits.tpu)
    run = analysed_processes(
        given.traces,
        given.where,
        capacity=limits.capacity_bytes,
        per_process=partial(breach_findings, limits=limits) if in_full else None,
        per_summary=None if in_full else partial(summary_findings, limits=limits),
        expect_summaries=not given.imported,
        stored=given.stored,
    )
    found = [f"{p.name} ({p.path}): {line}" for p in run.processes for line in p.findings]
    found += [f"left out {path}: {why}" for path, why in run.unreadable]
    if imbalance is not None:
        found += imbalance_breaches(run, imbalance)
    # (the busiest process's summary, its trace read in full, was held to the trace)
    judged = sum(
        p.made_from == "summary" for at, p in enumerate(run.processes) if at != run.busiest_at
    )
    trusted = (
        f"{judged:,} of {len(run.processes):,} processes judged by the summaries their "
        "recordings left, not by their traces, as --trust-summaries asks"
        if judged
        else None
    )
    return found, trusted
