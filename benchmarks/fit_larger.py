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

from fit_vs_aot import HERE, fit_against_anchor

if __name__ == "__main__":
    script = str(HERE.parent / "examples" / "jax_llama_step.py")
    fit_against_anchor(
        ["--search", "--tpu", "v5e-8", "-o", "jax_llama_step.search.tpumem", script],
        "fit_larger_anchor.py",
        1,
        warm=False,
    )
