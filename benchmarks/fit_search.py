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

from fit_vs_aot import HERE, fit_against_anchor

if __name__ == "__main__":
    # (fit exits 1: the step does not fit as written.)
    fit_against_anchor(
        ["--tpu", "v5e-1", "-o", "fit_search_mlp.fit.tpumem", str(HERE / "fit_search_mlp.py")],
        "fit_search_anchor.py",
        3,
        ok=(1,),
    )
