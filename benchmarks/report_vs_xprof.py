"""`tpumem report PROFILE` of a real TensorFlow profile against XProf's own
memory_profile conversion of the same file, whole process to whole process, in
turns, as a user runs them.

    .venv/bin/python benchmarks/report_vs_xprof.py [--steps 20000 200000] [--repeats 5]

For each profile (an eager loop of `steps` small ops, 6 memory events a step:
20,000 steps make 23 MB of xplane, 200,000 make 238 MB): the medians and spreads
of the wall time and peak memory of
- `tpumem report PROFILE` (read, analyse, print the text report; goal <= 1.0x XProf),
- `tpumem import PROFILE` (read, write a trace; goal <= 0.8x XProf),
- a Python process that imports XProf and converts the file (the anchor),
and the ratios. Also the CLI's start-up: `tpumem --version`, and `tpumem report`
of a tiny trace against `python -c pass`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from common import WORK, compiled_like_an_install, seconds_and_memory

XPROF = (
    "import sys\n"
    "from xprof.convert.raw_to_tool_data import xspace_to_tool_data\n"
    "data, _ = xspace_to_tool_data([sys.argv[1]], 'memory_profile', {})\n"
    "assert data, 'XProf returned no memory profile'\n"
)
TPUMEM = [sys.executable, "-m", "tpumem"]
TINY = Path(__file__).resolve().parent.parent / "tests" / "data" / "gpu" / "known.tpumem"


def profile(steps: int) -> Path:
    from tpumem.importer import find_profiles

    logdir = WORK / f"tf_eager_{steps}"
    if not logdir.exists():
        print(f"making a TensorFlow profile of {steps:,} eager steps ...", flush=True)
        script = Path(__file__).parent / "make_tf_profile.py"
        subprocess.run([sys.executable, str(script), str(logdir), str(steps)], check=True)
    return find_profiles(logdir)[1][0].path


def spread(values: list[float], unit: str = "s", scale: float = 1.0) -> str:
    numbers = [v / scale for v in values]
    return (
        f"{statistics.median(numbers):.2f} {unit} "
        f"({min(numbers):.2f}-{max(numbers):.2f}, median of {len(numbers)})"
    )


def in_turns(commands: dict[str, list[str]], repeats: int) -> dict[str, list[tuple[float, int]]]:
    """Each command once a round, `repeats` rounds, after one warm-up round
    (the page cache holds the file for all of them)."""
    results: dict[str, list[tuple[float, int]]] = {name: [] for name in commands}
    for command in commands.values():
        seconds_and_memory(command)
    for _ in range(repeats):
        for name, command in commands.items():
            results[name].append(seconds_and_memory(command))
    return results


def compare(steps: int, repeats: int) -> None:
    xplane = profile(steps)
    trace = WORK / "report_vs_xprof.tpumem"
    commands = {
        "xprof": [sys.executable, "-c", XPROF, str(xplane)],
        "report": [*TPUMEM, "report", str(xplane)],
        "import": [*TPUMEM, "import", "--force", "-o", str(trace), str(xplane)],
    }
    results = in_turns(commands, repeats)
    anchor = statistics.median(s for s, _ in results["xprof"])
    anchor_memory = statistics.median(m for _, m in results["xprof"])
    print(f"profile: {xplane.name}, {xplane.stat().st_size / 1e6:.0f} MB ({steps:,} steps)")
    for name, goal in (("xprof", None), ("report", 1.0), ("import", 0.8)):
        seconds = [s for s, _ in results[name]]
        memory = [m for _, m in results[name]]
        line = f"  {name:7} {spread(seconds)}, peak {spread(memory, 'GB', 1e9)}"
        if goal is not None:
            ratio = statistics.median(seconds) / anchor
            memory_ratio = statistics.median(memory) / anchor_memory
            line += f"; ratio {ratio:.2f} (goal <= {goal}), memory {memory_ratio:.2f}"
        print(line, flush=True)


def start_up(repeats: int) -> None:
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "tpumem --version": [*TPUMEM, "--version"],
        "tpumem report (tiny trace)": [*TPUMEM, "report", str(TINY)],
    }
    results = in_turns(commands, repeats)
    print("start-up:")
    for name, runs in results.items():
        print(f"  {name:27} {spread([s for s, _ in runs])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, nargs="+", default=[20000, 200000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    compiled_like_an_install()
    start_up(args.repeats)
    for steps in args.steps:
        compare(steps, args.repeats)


if __name__ == "__main__":
    main()
