"""`tpumem compare` of three 1M-event traces to an HTML page, and the page of a
10M-event run, each command in a fresh process as a user runs it.

    .venv/bin/python benchmarks/compare_html.py [--events 1000000] [--big 10000000]

Goals (issue 6): compare of three 1M-event traces to HTML <= 10 s; the HTML of a
10M-event run under 20 MB. Anchor, measured in the same run: `tpumem report
--format json` of the same three traces, one after the other (the analysis that
any comparison needs), so the ratio is what comparing and drawing add to it.
With Chromium installed (Debian's `chromium`), the pages are also loaded in
headless Chromium by tests/browser/chromium_check.py, which fails on any console error.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from common import WORK, tpumem_seconds
from synthetic_trace import write_synthetic

ROOT = Path(__file__).resolve().parent.parent
# Three runs of one model as three frameworks leave them: allocator events, buffer
# lifetimes with step marks, buffer lifetimes without.
# The same files as analysis_scale.py's, so one writes them for both.
KINDS = ("allocator", "buffer", "buffer-nosteps")


def _trace(events: int, kind: str) -> Path:
    path = WORK / f"synthetic_{kind}_{events}.tpumem"
    if not path.exists():
        print(f"writing {path.name} ...", flush=True)
        fidelity = kind.removesuffix("-nosteps")
        write_synthetic(path, events, fidelity, marks=not kind.endswith("-nosteps"))
    return path


def _median(runs: list[float]) -> float:
    return sorted(runs)[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--big", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    traces = [str(_trace(args.events, kind)) for kind in KINDS]
    page = WORK / "compare.html"
    compare_times, anchor_times = [], []
    for _ in range(args.repeats):
        compare_times.append(tpumem_seconds("compare", *traces, "--html", str(page)))
        anchor_times.append(sum(tpumem_seconds("report", t, "--format", "json") for t in traces))
    ours, anchor = _median(compare_times), _median(anchor_times)
    print(
        f"compare of 3 x {args.events:,} events to HTML: {ours:.2f} s "
        f"(median of {args.repeats}; goal <= 10 s); page {page.stat().st_size / 1e6:.2f} MB"
    )
    print(
        f"anchor, 3 x `tpumem report --format json`: {anchor:.2f} s; "
        f"ratio compare+HTML / reports: {ours / anchor:.2f}"
    )
    pages = [page]
    if args.big:
        big = _trace(args.big, "allocator")
        big_page = WORK / "big.html"
        seconds = tpumem_seconds("report", str(big), "-o", str(big_page))
        print(
            f"report of {args.big:,} events to HTML: {seconds:.1f} s; page "
            f"{big_page.stat().st_size / 1e6:.2f} MB (goal < 20 MB)"
        )
        pages.append(big_page)
    if shutil.which("chromium"):
        for each in pages:
            check = ROOT / "tests" / "browser" / "chromium_check.py"
            subprocess.run([sys.executable, str(check), str(each)], check=True)
    else:
        print("chromium not installed: pages not opened (apt install chromium)")


if __name__ == "__main__":
    main()
