"""`tpumem export tensorboard` of a 1M-event trace against XProf's own
memory_profile conversion of the file it writes, in one run.

    .venv/bin/python benchmarks/export_tensorboard.py [--events 1000000] [--repeats 3]

Goal (issue 7): export <= 5 s. Both are timed in this process after a warm-up
call (imports and first-call costs are not the comparison): tpumem loads the
trace, analyses it and writes the XSpace and the scalars; XProf reads that XSpace
and builds its memory profile.
"""

from __future__ import annotations

import argparse
import shutil

from common import WORK, median_seconds
from synthetic_trace import write_synthetic

from tpumem.export.tensorboard import export_tensorboard


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    results = {}
    for kind in ("allocator", "buffer"):
        trace = WORK / f"synthetic_{kind}_{args.events}.tpumem"
        if not trace.exists():
            print(f"writing {trace.name} ...", flush=True)
            write_synthetic(trace, args.events, kind)
        logdir = WORK / f"tb_{kind}"
        shutil.rmtree(logdir, ignore_errors=True)

        def ours(trace=trace, logdir=logdir):
            return export_tensorboard([trace], logdir, force=True)  # timed again and again

        (exported,) = ours()
        xplane = exported.xplanes[0]

        def theirs(xplane=xplane):
            from xprof.convert.raw_to_tool_data import xspace_to_tool_data

            data, _ = xspace_to_tool_data([str(xplane)], "memory_profile", {})
            assert data, "XProf returned no memory profile"

        theirs()
        results[kind] = (
            median_seconds(ours, args.repeats),
            median_seconds(theirs, args.repeats),
            xplane.stat().st_size / 1e6,
        )
    for kind, (mine, xprof, size) in results.items():
        print(
            f"{kind} events, {args.events:,}: tpumem export {mine:.2f} s (goal <= 5 s), "
            f"xplane {size:.0f} MB; XProf's memory_profile of it {xprof:.2f} s; "
            f"ratio export / XProf {mine / xprof:.2f} (median of {args.repeats})"
        )


if __name__ == "__main__":
    main()
