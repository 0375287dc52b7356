"""What the PyTorch/XLA adapter's op hook adds to one op, plain against profiled.

    .venv/bin/python benchmarks/torch_xla_op_cost.py [--calls 400] [--repeats 3]

Runs the same timing script as `python script.py`, as `python script.py` inside a
torch function mode that does nothing (the hook PyTorch gives Python, which tpumem
uses: its own cost is the floor of any op hook in Python), and under `tpumem
profile`, in turns, and prints the median microseconds per op for
- an op that makes a tensor (`a.div(2.0)`), called 16 frames deep as a model's
  layers call theirs: its output is entered with its call stack;
- an op that updates a tensor in place (`a.add_(b)`), which makes none;
- a property read that gives no tensor (`a.device`);
- an Adam step over 4 parameters (`optimizer.step()`: about 60 calls of
  torch functions, which tpumem's hook no longer sees, optimizer_steps.py).
Each figure is the fastest of 9 timings of `--calls` ops (a tenth as many
steps), in one process.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from common import WORK, run_json

TIMING = """
import json, os, sys, timeit
import torch, torch_xla
from torch.overrides import TorchFunctionMode

class Nothing(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **kwargs) if kwargs else func(*args)

def deep(depth, op):
    return op() if depth == 0 else deep(depth - 1, op)

calls = int(sys.argv[1])
device = torch_xla.device()
a, b = torch.zeros(64, 64, device=device), torch.ones(64, 64, device=device)
params = [torch.nn.Parameter(torch.ones(64, 64, device=device)) for _ in range(4)]
for p in params:
    p.grad = torch.ones(64, 64, device=device)
adam = torch.optim.Adam(params)
torch_xla.sync()
ops = {"makes": lambda: deep(15, lambda: a.div(2.0)), "in_place": lambda: a.add_(b),
       "property": lambda: a.device}
mode = Nothing() if os.environ.get("NOTHING_MODE") else None
if mode is not None:
    mode.__enter__()
with torch.no_grad():
    took = {name: min(timeit.repeat(op, number=calls, repeat=9)) / calls * 1e6
            for name, op in ops.items()}
steps = calls // 10
took["adam_step"] = min(timeit.repeat(adam.step, number=steps, repeat=9)) / steps * 1e6
if mode is not None:
    mode.__exit__(None, None, None)
torch_xla.sync()
print(json.dumps(took))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    WORK.mkdir(parents=True, exist_ok=True)
    script = WORK / "torch_xla_op_cost_script.py"
    script.write_text(TIMING)
    python = sys.executable
    tpumem = [python, "-m", "tpumem", "profile", "--force", "-o", str(WORK / "op_cost.tpumem")]
    env = {"PJRT_DEVICE": "CPU"}
    kinds = {
        "plain": ([python, str(script), str(args.calls)], env),
        "nothing mode": ([python, str(script), str(args.calls)], {**env, "NOTHING_MODE": "1"}),
        "profiled": ([*tpumem, str(script), str(args.calls)], env),
    }
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    for repeat in range(args.repeats):
        print(f"run {repeat + 1}/{args.repeats}", file=sys.stderr)
        for kind, (command, extra) in kinds.items():
            results[kind].append(run_json(command, extra))
    for op in ("makes", "in_place", "property", "adam_step"):
        median = {kind: statistics.median(r[op] for r in runs) for kind, runs in results.items()}
        plain, nothing, profiled = median["plain"], median["nothing mode"], median["profiled"]
        print(
            f"{op:9}: plain {plain:.1f} us, in a mode that does nothing {nothing:.1f} us, "
            f"profiled {profiled:.1f} us a call; the mode {nothing - plain:+.1f} us, "
            f"tpumem's hook {profiled - nothing:+.1f} us, profiled/plain {profiled / plain:.3f}"
        )
    print(
        f"(median of {args.repeats} runs each, the fastest of 9 timings of {args.calls} ops "
        f"or {args.calls // 10} Adam steps)"
    )


if __name__ == "__main__":
    main()
