"""`tpumem import` of a snapshot made to flood the walker's table of live
allocations (tests/hostile_snapshots.py: every address a multiple of 2^32, so
that a hash keeping the address's low bits puts them all in one slot), at N
allocations and at 4N: linear cost reads about 4x, quadratic 16x.

    .venv/bin/python benchmarks/snapshot_flood.py [--allocations 160000] [--repeats 3]

Each import is timed inside a process of its own (the interpreter's start-up
left out, which would hide the ratio), by the C walker and by the unpickler
that reads where the walker is not built (TPUMEM_SNAPSHOT_UNPICKLER). The
import's figures are checked: the peak is every allocation at once.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import WORK, run_json

TIMES = 4  # the larger snapshot's allocations, to the smaller's
_TIMED = """
import json, sys, time
from pathlib import Path
from tpumem.analysis import analyze
from tpumem.outputs import create_trace
from tpumem.snapshots.importing import import_snapshot
from tpumem.trace.reader import load

source, target = Path(sys.argv[1]), Path(sys.argv[2])
target.unlink(missing_ok=True)
start = time.perf_counter()
written, converted = import_snapshot(source, lambda: (target, create_trace(target, (), False)))
seconds = time.perf_counter() - start
(device,) = analyze(load(written)).devices
print(json.dumps({"seconds": seconds, "peak": device.peak.bytes}))
"""


def _seconds(snapshot: Path, allocations: int, unpickler: bool, repeats: int) -> float:
    from hostile_snapshots import FLOOD_BYTES

    env = {"TPUMEM_SNAPSHOT_UNPICKLER": "1"} if unpickler else {}
    best = float("inf")
    for _ in range(repeats):
        command = [sys.executable, "-c", _TIMED, str(snapshot), str(WORK / "flood.tpumem")]
        found = run_json(command, env)
        if found["peak"] != allocations * FLOOD_BYTES:
            sys.exit(f"{snapshot.name}: peak {found['peak']}, not {allocations * FLOOD_BYTES}")
        best = min(best, found["seconds"])
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--allocations", type=int, default=160_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from hostile_snapshots import write_flooding_snapshot

    WORK.mkdir(exist_ok=True)
    sizes = (args.allocations, args.allocations * TIMES)
    files = {n: write_flooding_snapshot(WORK / f"flood_{n}.pickle", n) for n in sizes}
    results = {}
    for reader, unpickler in (("C walker", False), ("unpickler", True)):
        times = [_seconds(files[n], n, unpickler, args.repeats) for n in sizes]
        results[reader] = times
        print(
            f"{reader}: {sizes[0]:,} allocations ({files[sizes[0]].stat().st_size / 2**20:.1f} "
            f"MiB) {times[0]:.2f} s; {sizes[1]:,} ({files[sizes[1]].stat().st_size / 2**20:.1f} "
            f"MiB) {times[1]:.2f} s; {TIMES}x the allocations: {times[1] / times[0]:.1f}x the "
            "time (linear: about 4)",
            flush=True,
        )
    print(json.dumps(results))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    main()
