"""`tpumem report` of a distributed run: 64 synthetic traces of 1M events each
(a training loop per process, each drawing its own activation sizes), against
one trace's report, whole process to whole process as a user runs them.

    .venv/bin/python benchmarks/run_scale.py [--processes 64] [--events 1000000]

Goal (issue 21): the run's report within 1.2x of (one trace's report x processes
/ cores), and the whole process tree's peak memory within 2 GiB. The tree's
memory is sampled every 20 ms from /proc (the sum of every process's RSS).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from common import WORK, tpumem_seconds_and_memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=64)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3, help="of the one-trace anchor")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic_trace import write_synthetic

    run = WORK / f"run_{args.processes}x{args.events}"
    run.mkdir(parents=True, exist_ok=True)
    for rank in range(args.processes):
        path = run / f"synthetic-{rank}.tpumem"
        if not path.exists():
            print(f"writing {path.name} ...", flush=True)
            write_synthetic(path, args.events, "buffer", seed=rank, process=(rank, args.processes))
    cores = len(os.sched_getaffinity(0))
    one = [
        tpumem_seconds_and_memory("report", str(run / "synthetic-0.tpumem"))
        for _ in range(args.repeats)
    ]
    one_s = statistics.median(s for s, _ in one)
    whole_s, whole_rss = tpumem_seconds_and_memory("report", str(run))
    anchor = one_s * args.processes / cores
    gib = 1 << 30
    print(
        f"one trace's report: {one_s:.2f} s (median of {args.repeats}), peak "
        f"{max(r for _, r in one) / gib:.2f} GiB"
    )
    print(
        f"the run's report ({args.processes} traces of {args.events:,} events, "
        f"{cores} cores): {whole_s:.1f} s, peak {whole_rss / gib:.2f} GiB (the process tree)"
    )
    print(
        f"ratio against one report x {args.processes} / {cores} ({anchor:.1f} s): "
        f"{whole_s / anchor:.2f} (goal <= 1.2); memory goal <= 2 GiB: "
        f"{'met' if whole_rss <= 2 * gib else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
