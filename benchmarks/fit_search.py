"""`tpumem fit` searching what makes a refused step fit, against its anchor: the
same XLA:TPU compiles made bare with JAX's AOT API (fit_search_anchor.py),
whole process to whole process, in one run.

    .venv/bin/python benchmarks/fit_search.py [--repeats 3]

The script is fit_search_mlp.py, a 62-layer MLP step (f32[8192,8192] layers, 15.5 GiB of
parameters) on v5e-1: XLA:TPU refuses it; fit compiles it on v5p to show what
fills it, then donated (refused), then donated with its parameters in bfloat16
(it fits), and writes the trace and the report. XLA:TPU's budget for v5e is
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
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    fit = [sys.executable, "-m", "tpumem", "fit", "-q", "--tpu", "v5e-1", "--force"]
    fit += ["-o", "fit_search_mlp.fit.tpumem", str(HERE / "fit_search_mlp.py")]
    anchor = [sys.executable, str(HERE / "fit_search_anchor.py")]
    env = _libtpu_env()
    _seconds(fit, ok=(1,))  # XLA:TPU's budget for v5e into tpumem's cache
    # (fit exits 1: the step does not fit as written.)
    result = in_turns(
        lambda: _seconds(anchor, env), lambda: _seconds(fit, ok=(1,)), options.repeats
    )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
