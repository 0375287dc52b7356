"""`tpumem fit --search` of a step that fits, against its anchor: the same
XLA:TPU compiles made bare with JAX's AOT API (fit_larger_anchor.py), whole
process to whole process, in one run.

    .venv/bin/python benchmarks/fit_larger.py [--repeats 1]

The script is examples/jax_llama_step.py (a Llama-shaped 1B step, FSDP, remat,
AdamW) on v5e-8 at batch 8: it fits; fit compiles its init and step, then the
step at twice the batch, and twice that, until XLA:TPU refuses, and writes the
trace and the report (the largest batch that fits). XLA:TPU's budget for v5e is
measured once before (tpumem's cache then holds it). The two alternate,
`repeats` times each; printed: the medians and fit / anchor.
"""

from __future__ import annotations

import argparse
import json
import sys

from common import WORK, in_turns
from fit_vs_aot import HERE, _libtpu_env, _seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=1)
    options = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    script = str(HERE.parent / "examples" / "jax_llama_step.py")
    fit = [sys.executable, "-m", "tpumem", "fit", "-q", "--search", "--tpu", "v5e-8", "--force"]
    fit += ["-o", "jax_llama_step.search.tpumem", script]
    anchor = [sys.executable, str(HERE / "fit_larger_anchor.py")]
    env = _libtpu_env()
    result = in_turns(lambda: _seconds(anchor, env), lambda: _seconds(fit), options.repeats)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
