"""The anchor of fit_sweep.py: the distinct programs `tpumem fit --sweep
batch=8,16,32 --sweep remat=full,dots` compiles for examples/jax_llama_step.py
on v5e:2x4, bare, with JAX's own ahead-of-time API in one process: the init once
(no point changes it), then the step at each batch under each policy. Run with
libtpu on the path and JAX_PLATFORMS=cpu (fit_sweep.py sets both)."""

from __future__ import annotations

from fit_anchor import initialised, parse_args, tokens

BATCHES = (8, 16, 32)
POLICIES = ("full", "dots")

model, state = initialised(parse_args([]))
for policy in POLICIES:
    args = parse_args(["--remat", policy])
    step = initialised(args, init=False)[0]["step"]
    for batch in BATCHES:
        step.lower(state, tokens(model, args, batch)).compile()
        print("compiled", policy, batch)
