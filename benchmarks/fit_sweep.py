"""`tpumem fit --sweep` of two swept arguments, against its anchor: the distinct
programs it compiles, made bare with JAX's AOT API (fit_sweep_anchor.py), whole
process to whole process, in one run.

    .venv/bin/python benchmarks/fit_sweep.py [--repeats 1]

The script is examples/jax_llama_step.py (a Llama-shaped 1B step, FSDP, AdamW)
on v5e-8, swept over batch 8, 16, 32 and remat full, dots: six points, each a run
of the script under fit with a trace, all of which fit. The init, which no point
changes, is compiled at the first point and read back at the others; the anchor
compiles it once. XLA:TPU's budget for v5e is measured once before (tpumem's
cache then holds it). The two alternate, `repeats` times each; printed: the
medians and fit / anchor.
"""

from __future__ import annotations

import argparse
import json
import sys

from common import WORK, in_turns
from fit_vs_aot import HERE, _libtpu_env, _seconds

# (As fit_sweep_anchor.py's BATCHES and POLICIES.)
SWEEPS = ("--sweep", "batch=8,16,32", "--sweep", "remat=full,dots")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=1)
    options = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    script = str(HERE.parent / "examples" / "jax_llama_step.py")
    fit = [
        sys.executable,
        "-m",
        "tpumem",
        "fit",
        "-q",
        "--tpu",
        "v5e-8",
        "--force",
        *SWEEPS,
        script,
    ]
    anchor = [sys.executable, str(HERE / "fit_sweep_anchor.py")]
    result = in_turns(
        lambda: _seconds(anchor, _libtpu_env()), lambda: _seconds(fit), options.repeats
    )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
