"""What `--capacity` costs: `tpumem report TRACE --capacity SIZE` against `tpumem
report TRACE` of the same synthetic trace, whole process to whole process (as a
user runs them), median of `--repeats`. The option replays the run through the
allocator model once at SIZE and once per bisection step for the smallest size
that holds it.

    .venv/bin/python benchmarks/capacity_search.py [--sizes 100000 1000000]

Traces: buffer lifetimes with step marks (repeated steps are copied, not
replayed: a training loop) and without (every event replayed: the worst case).
SIZE is half the peak, so the replay at SIZE stops early and the bisection does
the work.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from common import WORK, median_seconds


def _tpumem(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tpumem", *args], capture_output=True, text=True, check=True
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic_trace import write_synthetic

    for fidelity in ("buffer", "buffer-nosteps"):
        for size in args.sizes:
            path = WORK / f"synthetic_{fidelity}_{size}.tpumem"
            if not path.exists():
                print(f"writing {path.name} ...", flush=True)
                write_synthetic(path, size, "buffer", marks=fidelity == "buffer")
            report = json.loads(_tpumem("report", str(path), "-f", "json").stdout)
            half = str(report["devices"][0]["peak"]["bytes"] // 2)
            plain = median_seconds(lambda p=path: _tpumem("report", str(p)), args.repeats)
            asked = median_seconds(
                lambda p=path, h=half: _tpumem("report", str(p), "--capacity", h), args.repeats
            )
            with_capacity = json.loads(
                _tpumem("report", str(path), "-f", "json", "--capacity", half).stdout
            )
            smallest = with_capacity["capacity"][0]["smallest_bytes"]
            print(
                f"{fidelity:14s} {size:>9,} events: report {plain:5.2f} s, with --capacity "
                f"{asked:5.2f} s: ratio {asked / plain:.2f} (smallest that holds it: "
                f"{smallest / 2**20:.1f} MiB)",
                flush=True,
            )


if __name__ == "__main__":
    main()
