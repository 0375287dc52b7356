"""`tpumem fit --gpu H100-80GB` of a 1.1-billion-parameter GPT step
(examples/torch_gpt_1b.py: batch 8, sequence 1024, AdamW), against its anchor:
the same three optimizer steps on PyTorch's fake tensors alone
(fake_tensors_alone.py), whole process to whole process, alternating.

    .venv/bin/python benchmarks/fit_gpu.py [--repeats 3]

Printed: the medians, fit / anchor, and fit's own seconds against the goal of
30 s for a 1B step (issue 69).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from common import compiled_like_an_install, in_turns, seconds_and_memory

HERE = Path(__file__).resolve().parent
SCRIPT = str(HERE.parent / "examples" / "torch_gpt_1b.py")
STEPS = 3  # (fit's default --steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    compiled_like_an_install()
    with tempfile.TemporaryDirectory() as work:
        trace = str(Path(work) / "gpt.fit.tpumem")
        fit = [sys.executable, "-m", "tpumem", "fit", "-q", "--gpu", "H100-80GB", "--force"]
        fit += ["-o", trace, SCRIPT]
        anchor = [sys.executable, str(HERE / "fake_tensors_alone.py"), str(STEPS), SCRIPT]
        result = in_turns(
            lambda: seconds_and_memory(anchor)[0],
            lambda: seconds_and_memory(fit)[0],
            args.repeats,
        )
    result = {
        "anchor_fake_tensors_s": result.pop("anchor_aot_s"),
        **result,
        "goal_s": 30.0,
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
