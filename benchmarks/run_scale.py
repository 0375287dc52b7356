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
import subprocess
import sys
import threading
import time
from pathlib import Path

from common import WORK


def _tree_rss(root: int) -> int:
    """The resident bytes of `root` and every process under it."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(rss.get(pid, 0) for pid in tree)


def _timed(*args: str) -> tuple[float, int]:
    """(wall seconds, the process tree's peak RSS) of `tpumem ARGS`."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "tpumem", *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    peak, done = 0, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, _tree_rss(child.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, errors = child.communicate()
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    if child.returncode != 0:
        raise SystemExit(f"tpumem {' '.join(args)} failed: {errors.decode()[-2000:]}")
    return seconds, peak


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
    one = [_timed("report", str(run / "synthetic-0.tpumem")) for _ in range(args.repeats)]
    one_s = statistics.median(s for s, _ in one)
    whole_s, whole_rss = _timed("report", str(run))
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
