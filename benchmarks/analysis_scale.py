"""Analysis of synthetic traces of 1M and 10M allocation events, each in a fresh
process: load + every figure + the text report, wall time and peak RSS.

    .venv/bin/python benchmarks/analysis_scale.py [--sizes 1000000 10000000]

Goals (issue 2): <= 3 s at 1M, <= 30 s at 10M, peak RSS <= 2 GiB. Measured
separately: allocator fidelity (addresses and the allocator's own figures);
buffer fidelity with step marks (the BFC model copies repeated steps); and
buffer fidelity without step marks ("buffer-nosteps": every event replayed);
allocator fidelity with a capture gap every 10 steps whose frees went unseen
("allocator-gaps": unseen_frees.py's sweep; 1,000 gaps a million events).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from common import WORK

# The BFC model replaying every event: what a trace whose steps all differ costs
# (the synthetic steps repeat exactly, so the analysis above copies them).
REPLAY_ALL = """
import json, resource, sys, time
from tpumem.analysis.allocators.bfc_model import replay
from tpumem.analysis.device_events import split_by_device
from tpumem.trace.reader import load
(events,) = split_by_device(load(sys.argv[1]))
start = time.perf_counter()
replay(events.is_alloc, events.requested, events.buffer_id)
seconds = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "rss": rss, "events": len(events)}))
"""

CHILD = """
import json, resource, sys, time
from tpumem.analysis import analyze
from tpumem.report import REPORT, reporter
from tpumem.trace.reader import load
start = time.perf_counter()
analysis = analyze(load(sys.argv[1]))
reporter(REPORT, "text").render(analysis)
seconds = time.perf_counter() - start
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"seconds": seconds, "rss": rss, "peak": analysis.devices[0].peak.bytes}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    kinds = ["allocator", "allocator-gaps", "buffer", "buffer-nosteps"]
    parser.add_argument("--fidelity", nargs="+", default=kinds)
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic_trace import write_synthetic

    goals = {1_000_000: 3.0, 10_000_000: 30.0}
    for fidelity in args.fidelity:
        for size in args.sizes:
            path = WORK / f"synthetic_{fidelity}_{size}.tpumem"
            if not path.exists():
                print(f"writing {path.name} ...", flush=True)
                kind = fidelity.removesuffix("-nosteps").removesuffix("-gaps")
                gaps = 10 if fidelity.endswith("-gaps") else 0
                marks = not fidelity.endswith("-nosteps")
                write_synthetic(path, size, kind, marks=marks, gap_every=gaps)
            figures = measure(CHILD, path)
            if figures:
                print(
                    f"{fidelity:14s} {size:>11,} events: {figures['seconds']:6.2f} s"
                    f" (goal {goals.get(size)} s), peak RSS {figures['rss'] / 2**30:.2f} GiB"
                    f" (goal 2 GiB), file {path.stat().st_size / 2**20:.0f} MiB",
                    flush=True,
                )
    for size in args.sizes:
        path = WORK / f"synthetic_buffer-nosteps_{size}.tpumem"
        figures = measure(REPLAY_ALL, path) if path.exists() else None
        if figures:
            per_event = figures["seconds"] / figures["events"] * 1e6
            print(
                f"BFC model replaying every event, {size:>11,} events: "
                f"{figures['seconds']:6.2f} s ({per_event:.2f} us an event), "
                f"peak RSS {figures['rss'] / 2**30:.2f} GiB",
                flush=True,
            )


def measure(code: str, path: Path) -> dict | None:
    """Runs `code` on the trace in a fresh process: its figures, or None on failure."""
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
    if result.returncode:
        print(result.stderr[-2000:])
        return None
    return json.loads(result.stdout)


if __name__ == "__main__":
    main()
