"""tpumem import + report of a real TensorFlow profile (>= 100k memory events)
against XProf's own memory_profile conversion of the same file, in one run.

    .venv/bin/python benchmarks/import_vs_xprof.py [--steps 20000] [--repeats 5]

Prints both medians and the ratio tpumem / XProf (goal: <= 1.0).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from common import WORK, median_seconds

from tpumem.analysis import analyze
from tpumem.importer import find_profiles, import_profile
from tpumem.outputs import create_trace
from tpumem.report import REPORTERS
from tpumem.trace.reader import load


def profile(steps: int) -> Path:
    logdir = WORK / f"tf_eager_{steps}"
    if not logdir.exists():
        print(f"making a TensorFlow profile of {steps:,} eager steps ...", flush=True)
        script = Path(__file__).parent / "make_tf_profile.py"
        subprocess.run([sys.executable, str(script), str(logdir), str(steps)], check=True)
    return find_profiles(logdir)[1][0].path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    xplane = profile(args.steps)
    run, hosts = find_profiles(xplane)
    output = WORK / "bench.tpumem"

    def create() -> tuple[Path, int]:  # the benchmark's own file, written again each time
        return output, create_trace(output, [], force=True)

    def tpumem() -> None:
        import_profile(hosts[0], run, create)
        REPORTERS["text"].render(analyze(load(output)))

    def xprof() -> None:
        from xprof.convert.raw_to_tool_data import xspace_to_tool_data

        data, _ = xspace_to_tool_data([str(xplane)], "memory_profile", {})
        assert data, "XProf returned no memory profile"

    _, events, _ = import_profile(hosts[0], run, create)
    xprof()  # warm both: imports and first-call costs are not the comparison
    tpumem()
    ours = median_seconds(tpumem, args.repeats)
    theirs = median_seconds(xprof, args.repeats)
    size_mb = xplane.stat().st_size / 1e6
    print(f"profile: {xplane.name}, {size_mb:.1f} MB, {events:,} memory events")
    print(f"tpumem import + analysis + text report: {ours:.3f} s (median of {args.repeats})")
    print(f"XProf memory_profile conversion:        {theirs:.3f} s (median of {args.repeats})")
    print(f"ratio tpumem / XProf: {ours / theirs:.2f} (goal <= 1.0)")


if __name__ == "__main__":
    main()
