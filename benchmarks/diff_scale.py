"""What `tpumem diff` costs: `tpumem diff A B` of two synthetic traces against
`tpumem report A` and `tpumem report B`, whole process to whole process (as a user
runs them), median of `--repeats`. The traces are training loops with step marks
and a call stack per buffer; B keeps its steps' activations a little longer
(another version of the program), so the diff has changes to list.

    .venv/bin/python benchmarks/diff_scale.py [--events 1000000] [--repeats 3]

Goal (issue 20): the diff within 1.5x the time of the two reports.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from common import WORK, tpumem_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic_trace import write_synthetic

    paths = []
    for name, seed in (("before", 0), ("after", 1)):
        path = WORK / f"diff_{name}_{args.events}.tpumem"
        if not path.exists():
            print(f"writing {path.name} ...", flush=True)
            write_synthetic(path, args.events, "buffer", stacks=True, seed=seed)
        paths.append(str(path))
    diffs, reports = [], []
    for repeat in range(args.repeats):
        reports.append(tpumem_seconds("report", paths[0]) + tpumem_seconds("report", paths[1]))
        diffs.append(tpumem_seconds("diff", *paths))
        print(
            f"run {repeat + 1}/{args.repeats}: diff {diffs[-1]:.2f} s, "
            f"two reports {reports[-1]:.2f} s",
            flush=True,
        )
    diff, two = sorted(diffs)[len(diffs) // 2], sorted(reports)[len(reports) // 2]
    print(
        f"diff of two {args.events:,}-event traces: {diff:.2f} s; two reports: {two:.2f} s; "
        f"ratio {diff / two:.2f} (goal <= 1.5; median of {args.repeats})"
    )


if __name__ == "__main__":
    main()
