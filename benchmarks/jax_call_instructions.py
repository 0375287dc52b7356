"""JAX's cost a call in machine instructions, plain against profiled: a count that
does not move with the machine's load, where timings here spread by 30 % and more.

    .venv/bin/python benchmarks/jax_call_instructions.py [--calls 1000,6000]

Runs an eager `x + y` loop under valgrind's callgrind (apt-get install valgrind),
as `python script.py` and under `tpumem profile`, each at two loop lengths, and
counts the instructions of the thread that runs the script. The difference
between the two lengths, divided by the difference in calls, is the cost of one
call: start-up, imports and the recording's start and end cancel out. Slow (a
few minutes): valgrind runs every instruction on a simulated CPU.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from common import WORK

LOOP = """
import sys
import jax.numpy as jnp
x, y = jnp.ones(16), jnp.ones(16)
for _ in range(300):
    x + y
for _ in range(int(sys.argv[1])):
    x + y
"""
# Fixed hashes and one BLAS thread: the start-ups of two runs differ by less.
QUIET = {"PYTHONHASHSEED": "0", "OPENBLAS_NUM_THREADS": "1", "JAX_PLATFORMS": "cpu"}


def main_thread_instructions(command: list[str], marker: str) -> int:
    """The instructions of the main thread of the process whose command line holds
    `marker`, with every child process followed."""
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--trace-children=yes",
                "--separate-threads=yes",
                f"--callgrind-out-file={out}/cg.%p.out",
                *command,
            ],
            cwd=WORK,
            env={**os.environ, **QUIET},
            capture_output=True,
            check=True,
        )
        for path in Path(out).glob("cg.*.out-01"):
            text = path.read_text(errors="replace")
            cmd = re.search(r"^cmd: (.*)$", text, re.MULTILINE)
            if cmd and marker in cmd[1]:
                return int(re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)[1])
    sys.exit(f"no callgrind output for {marker!r}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", default="1000,6000", help="the two loop lengths")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    short, long = (int(n) for n in args.calls.split(","))
    WORK.mkdir(exist_ok=True)
    script = WORK / "jax_call_instructions.py"
    script.write_text(LOOP)
    trace = str(WORK / "jax_call_instructions.tpumem")
    plain = [sys.executable, str(script)]
    profile = ["profile", "-q", "--force", "-o", trace]
    profiled = [sys.executable, "-m", "tpumem", *profile, str(script)]
    per_call = {}
    for name, command, marker in (
        ("plain", plain, str(script)),
        ("profiled", profiled, "tpumem.adapters.runner"),
    ):
        counts = [main_thread_instructions([*command, str(n)], marker) for n in (short, long)]
        per_call[name] = (counts[1] - counts[0]) / (long - short)
        print(f"{name:8}: {per_call[name]:,.0f} instructions a call", flush=True)
    extra = per_call["profiled"] - per_call["plain"]
    print(
        f"profiled / plain {per_call['profiled'] / per_call['plain']:.2f}, "
        f"+{extra:,.0f} instructions a call "
        f"(eager x + y, {long - short} calls between the two lengths)"
    )


if __name__ == "__main__":
    main()
