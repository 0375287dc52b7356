"""The long fuzzing campaign: thousands of mutants of real traces and profiles, and
the hand-built hostile traces, each through the real CLI entry point. Prints the
count of each outcome and every finding; exit status 1 if there was one.

    python tests/tools/fuzz_campaign.py [--count 5000] [--seed 1] [--sources FILE ...]

With no --sources it mutates the real traces under tests/data/gpu and the real
profiles under tests/data/xplane. docs/robustness.md keeps the counts.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from fuzzing import Campaign, write_mutants  # noqa: E402
from hostile_traces import cases  # noqa: E402


def default_sources() -> list[Path]:
    return sorted((TESTS / "data" / "gpu").glob("*.tpumem")) + sorted(
        (TESTS / "data" / "xplane").glob("*.xplane.pb")
    )


def jobs_for(path: Path, how: str, work: Path, index: int) -> list:
    if path.name.endswith(".xplane.pb"):
        out = work / f"imported-{index}.tpumem"
        return [
            (str(path), how, ["import", str(path), "-o", str(out)]),
            (str(path), how + " (imported)", ["report", str(out), "-f", "json"]),
        ]
    fmt = ("json", "text", "md")[index % 3]
    return [(str(path), how, ["report", str(path), "-f", fmt])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000, help="mutants in all")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sources", type=Path, nargs="*")
    options = parser.parse_args()
    sources = options.sources or default_sources()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        per_source = max(1, options.count // len(sources))
        mutants = write_mutants(sources, work / "mutants", per_source, options.seed)
        jobs = []
        for index, (path, how, _) in enumerate(mutants):
            jobs += jobs_for(path, how, work, index)
        for name, make in cases().items():
            path = make(work / f"hostile-{len(jobs)}.tpumem")
            for fmt in ("json", "text", "md", "html"):
                jobs.append((str(path), f"hand-built: {name}", ["report", str(path), "-f", fmt]))
        start = time.perf_counter()
        campaign = Campaign()
        campaign.run(jobs)
        seconds = time.perf_counter() - start
    counts = campaign.counts()
    print(
        f"{len(mutants):,} mutants of {len(sources)} files, {len(cases())} hand-built "
        f"traces: {len(jobs):,} runs in {seconds:.0f} s"
    )
    for verdict, count in counts.most_common():
        print(f"  {verdict}: {count:,}")
    findings = Counter()
    for outcome in campaign.failures():
        key = (
            outcome.verdict,
            outcome.detail.strip().splitlines()[-1][:150] if outcome.detail.strip() else "",
        )
        findings[key] += 1
        if findings[key] == 1:
            print(f"\n{outcome.verdict}: {outcome.how} ({outcome.path})\n{outcome.detail[-800:]}")
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()
