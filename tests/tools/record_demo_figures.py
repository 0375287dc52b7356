"""Records the demo's traces and their JSON reports for tests/cli/test_demo_figures.py:
run `make demo` first, then

    .venv/bin/python tests/tools/record_demo_figures.py

It keeps demo/*.tpumem gzipped under tests/data/demo with `tpumem report --format
json` of each. Re-record only when a figure is meant to change, and say why.
`--reports-only` re-records the reports of the traces already kept (the report
changed, not the runs). `--only RUN` records that run alone (a run added)."""

from __future__ import annotations

import gzip
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNS = ("tf_transformer", "jax_transformer", "torch_xla_transformer", "torch_transformer")


def _report(trace: Path) -> bytes:
    return subprocess.run(
        [sys.executable, "-m", "tpumem", "report", str(trace), "--format", "json"],
        capture_output=True,
        check=True,
    ).stdout


def main() -> None:
    target = ROOT / "tests" / "data" / "demo"
    target.mkdir(parents=True, exist_ok=True)
    arguments = sys.argv[1:]
    chosen = RUNS
    if "--only" in arguments:
        chosen = (arguments[arguments.index("--only") + 1],)
    for run in chosen:
        if "--reports-only" in sys.argv[1:]:
            with tempfile.TemporaryDirectory() as scratch:
                trace = Path(scratch) / f"{run}.tpumem"
                trace.write_bytes(gzip.decompress((target / f"{run}.tpumem.gz").read_bytes()))
                report = _report(trace)
            (target / f"{run}.report.json.gz").write_bytes(gzip.compress(report, 9))
            print(f"{run}: {len(report):,} bytes of report")
            continue
        trace = ROOT / "demo" / f"{run}.tpumem"
        if not trace.is_file():
            sys.exit(f"{trace}: missing; run `make demo` first")
        report = _report(trace)
        (target / f"{run}.tpumem.gz").write_bytes(gzip.compress(trace.read_bytes(), 9))
        (target / f"{run}.report.json.gz").write_bytes(gzip.compress(report, 9))
        print(f"{run}: {trace.stat().st_size:,} bytes of trace, {len(report):,} of report")


if __name__ == "__main__":
    main()
