"""`tpumem fit --sweep` of two swept arguments, against its anchor: the distinct
programs it compiles, made bare with JAX's AOT API (fit_sweep_anchor.py), whole
process to whole process, in one run.

    .venv/bin/python benchmarks/fit_sweep.py [--repeats 1]

The script is examples/jax_llama_step.py (a Llama-shaped 1B step, FSDP, AdamW)
on v5e-8, swept over batch 8, 16, 32 and remat full, dots: six points, each a run
of the script under fit with a trace, all of which fit. The init, which no point
changes, is compiled at the first point and read back at the others; the anchor
compiles it once. XLA:TPU's budget for v5e comes from tpumem's cache (where it
lacks it, the first run measures it: seconds). The two alternate, `repeats`
times each; printed: the medians and fit / anchor.
"""

from __future__ import annotations

from fit_vs_aot import HERE, fit_against_anchor

# (As fit_sweep_anchor.py's BATCHES and POLICIES.)
SWEEPS = ["--sweep", "batch=8,16,32", "--sweep", "remat=full,dots"]

if __name__ == "__main__":
    script = str(HERE.parent / "examples" / "jax_llama_step.py")
    fit_against_anchor(["--tpu", "v5e-8", *SWEEPS, script], "fit_sweep_anchor.py", 1, warm=False)
