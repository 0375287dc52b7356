"""What the JAX adapter's hooks add to one call, plain against profiled, in one run.

    .venv/bin/python benchmarks/jax_call_cost.py [--calls 20000] [--repeats 3]

Runs the same timing script as `python script.py` and under `tpumem profile`, in
turns, and prints the median microseconds per call and the ratio, for
- an eager `x + y` of two small arrays (a jitted `jax.numpy` function);
- a jitted step with 91 outputs (the transformer example's parameters and Adam's
  moments), which donates its arguments;
- the same step's plain run with the CPU's asynchronous dispatch on and off
  (tpumem turns it off): what that setting alone costs.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from common import WORK, run_json

TIMING = """
import json, sys, time
import jax, jax.numpy as jnp
calls = int(sys.argv[1])
x, y = jnp.ones(16), jnp.ones(16)
for _ in range(200):
    x + y
start = time.perf_counter()
for _ in range(calls):
    x + y
eager = (time.perf_counter() - start) / calls * 1e6

step = jax.jit(lambda p: [a * 0.5 + 1 for a in p], donate_argnums=0)
params = [jnp.ones((64, 64)) for _ in range(91)]
for _ in range(20):
    params = step(params)
start = time.perf_counter()
for _ in range(calls // 10):
    params = step(params)
jax.block_until_ready(params)
jitted = (time.perf_counter() - start) / (calls // 10) * 1e6
print(json.dumps({"eager": eager, "jitted": jitted}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    # 20,000 calls, about 0.2 s plain: the window holds the recording's periodic
    # work (the book's rows written and its poll, every 0.1 s) as a run does.
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    script = WORK / "jax_call_cost.py"
    script.write_text(TIMING)
    plain = [sys.executable, str(script), str(args.calls)]
    trace = str(WORK / "jax_call_cost.tpumem")
    profiled = [sys.executable, "-m", "tpumem", "profile", "-q", "--force", "-o", trace, *plain[1:]]
    sync = {"JAX_CPU_ENABLE_ASYNC_DISPATCH": "false"}
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "plain, sync": [], "profiled": []}
    for repeat in range(args.repeats):
        runs["plain"].append(run_json(plain, {}))
        runs["plain, sync"].append(run_json(plain, sync))
        runs["profiled"].append(run_json(profiled, {}))
        print(f"run {repeat + 1}/{args.repeats}", flush=True)
    for what in ("eager", "jitted"):
        median = {
            name: statistics.median(r[what] for r in results) for name, results in runs.items()
        }
        print(
            f"{what:7}: plain {median['plain']:.1f} us, plain with sync dispatch "
            f"{median['plain, sync']:.1f} us, profiled {median['profiled']:.1f} us a call; "
            f"profiled / plain {median['profiled'] / median['plain']:.2f}, "
            f"+{median['profiled'] - median['plain']:.1f} us"
        )
    print(
        f"(median of {args.repeats} runs each, {args.calls} eager calls, {args.calls // 10} steps)"
    )


if __name__ == "__main__":
    main()
