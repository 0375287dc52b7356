"""What the pytest plugin costs a suite that does not use it, whole process to
whole process.

    .venv/bin/python benchmarks/pytest_plugin_overhead.py [--tests 200] [--repeats 5]

Writes `tests` trivial tests (no framework, no markers) and runs pytest on them
in turn without the plugin (`-p no:tpumem`, the anchor) and with it installed as
it is (loaded through its `pytest11` entry point), `repeats` times each; prints
the medians and the ratio with / without.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

from common import WORK


def run(arguments: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *arguments],
        cwd=WORK / "plugin_suite",
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    suite = WORK / "plugin_suite"
    suite.mkdir(parents=True, exist_ok=True)
    body = "".join(f"def test_{n}():\n    assert {n} + 1 > {n}\n\n" for n in range(args.tests))
    (suite / "test_trivial.py").write_text(body)
    (suite / "pytest.ini").write_text("[pytest]\n")  # this directory is the rootdir
    without, with_plugin = [], []
    for _ in range(args.repeats):  # in turns, so drifts of the machine hit both
        without.append(run(["-p", "no:tpumem"]))
        with_plugin.append(run([]))
    plain, loaded = statistics.median(without), statistics.median(with_plugin)
    print(f"{args.tests} trivial tests, median of {args.repeats}, whole pytest process")
    print(f"  without the plugin (-p no:tpumem): {plain:.3f} s")
    print(f"  with the plugin installed:         {loaded:.3f} s")
    print(f"  ratio: {loaded / plain:.3f}")


if __name__ == "__main__":
    main()
