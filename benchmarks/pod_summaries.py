"""A pod's run read from its hosts' summaries: 1,024 synthetic hosts' traces of
100k events each (a training loop per host, each drawing its own activation
sizes, with call stacks and step marks), each with the summary its host leaves,
reported whole process to whole process as a user runs it.

    .venv/bin/python benchmarks/pod_summaries.py [--hosts 1024] [--events 100000]
        [--anchor-hosts 64]

Goal (issue 53): `tpumem report RUN` from the summaries within 5 s and 1 GiB (the
process tree's peak, sampled from /proc). Anchor, same run: the same report with
no summaries (each trace read and analysed where the run is read, as before),
of the first --anchor-hosts hosts, scaled to the whole pod by the hosts' count
(a whole pod read that way takes most of an hour on two cores).

Also what the summary costs `tpumem profile`'s closing (the analysis behind the
report, its drawing points and the file), on one host's trace of --close-events
events, in turns with the closing as it was (the report's analysis alone): goal
at most 1.02.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from common import WORK, tpumem_seconds_and_memory

GIB = 1 << 30


def _host(job: tuple[Path, int, int, int]) -> float:
    """One host's trace, then its summary as the host's `tpumem profile` leaves it;
    the seconds the summary took."""
    from synthetic_trace import write_synthetic

    from tpumem.outputs import summary_of
    from tpumem.reading.summary_files import summarise_beside

    path, rank, hosts, events = job
    if not path.exists():
        write_synthetic(path, events, "buffer", stacks=True, seed=rank, process=(rank, hosts))
    if summary_of(path).exists():
        return 0.0
    began = time.perf_counter()
    unwritten = summarise_beside(path)
    assert unwritten is None, unwritten
    return time.perf_counter() - began


def _pod(hosts: int, events: int) -> tuple[Path, list[float]]:
    run = WORK / f"pod_{hosts}x{events}"
    run.mkdir(parents=True, exist_ok=True)
    jobs = [(run / f"host-{rank:04d}.tpumem", rank, hosts, events) for rank in range(hosts)]
    cores = len(os.sched_getaffinity(0))
    print(f"writing {hosts:,} hosts' traces and summaries in {run} ...", flush=True)
    with ProcessPoolExecutor(cores) as pool:
        costs = [c for c in pool.map(_host, jobs, chunksize=8) if c]
    return run, costs


def _closing(events: int, repeats: int) -> tuple[float, float]:
    """Seconds of `profile`'s closing (commands/profile.py's `_after_run`, its
    report to a null stderr) with the summary, and as it was before summaries
    (the trace analysed and its report rendered), in turns; median of each."""
    import contextlib

    from synthetic_trace import write_synthetic

    from tpumem.commands.profile import _after_run
    from tpumem.reading.analyses import analysed_with_events
    from tpumem.report import REPORT, reporter

    trace = WORK / f"close_{events}.tpumem"
    if not trace.exists():
        write_synthetic(trace, events, "buffer", stacks=True)
    text = reporter(REPORT, "text")

    def before() -> None:
        text.render(analysed_with_events(trace)[1], width=100)

    def now() -> None:
        _after_run(trace, text, 100, None)

    times: dict[str, list[float]] = {"before": [], "now": []}
    with open(os.devnull, "w") as null, contextlib.redirect_stderr(null):
        for _ in range(repeats):
            for name, step in (("before", before), ("now", now)):
                began = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - began)
    return statistics.median(times["now"]), statistics.median(times["before"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=1024)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--anchor-hosts", type=int, default=64)
    parser.add_argument("--close-events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--close-repeats", type=int, default=9, help="of the closing, in turns (noisy: 5 %%)"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))

    run, costs = _pod(args.hosts, args.events)
    size = sum(p.stat().st_size for p in run.glob("*.tpumem"))
    summaries = sum(p.stat().st_size for p in run.glob("*.summary.json"))
    print(
        f"{args.hosts:,} traces, {size / GIB:.2f} GiB; summaries {summaries / (1 << 20):.1f} MiB"
        + (f"; a host's summary took {statistics.median(costs):.2f} s (median)" if costs else "")
    )
    runs = [tpumem_seconds_and_memory("report", str(run)) for _ in range(args.repeats)]
    seconds = statistics.median(s for s, _ in runs)
    peak = max(r for _, r in runs)
    print(
        f"tpumem report of the pod from its summaries: {seconds:.2f} s (median of "
        f"{args.repeats}), peak {peak / GIB:.2f} GiB; goal <= 5 s, <= 1 GiB: "
        f"{'met' if seconds <= 5 and peak <= GIB else 'NOT met'}"
    )

    bare = WORK / f"pod_bare_{args.anchor_hosts}x{args.events}"
    shutil.rmtree(bare, ignore_errors=True)
    bare.mkdir(parents=True)
    for trace in sorted(run.glob("*.tpumem"))[: args.anchor_hosts]:
        os.link(trace, bare / trace.name)
    anchor_s, anchor_rss = tpumem_seconds_and_memory("report", str(bare))
    whole = anchor_s * args.hosts / args.anchor_hosts
    print(
        f"anchor: the report of {args.anchor_hosts} hosts with no summaries (each trace "
        f"analysed): {anchor_s:.1f} s, peak {anchor_rss / GIB:.2f} GiB; for {args.hosts:,} "
        f"hosts about {whole:.0f} s; from summaries: {seconds / whole:.3f} of that"
    )

    now, before = _closing(args.close_events, args.close_repeats)
    print(
        f"profile's closing of a {args.close_events:,}-event trace: with the summary "
        f"{now:.3f} s, as it was {before:.3f} s (median of {args.close_repeats}, in turns): "
        f"{now / before:.3f} (goal <= 1.02)"
    )


if __name__ == "__main__":
    main()
