"""The anchor of fit_larger.py: the compiles `tpumem fit --search` makes for
examples/jax_llama_step.py on v5e:2x4, bare, with JAX's own ahead-of-time API in
one process: the init, then the step at batch 8, 16, 32, ... until XLA:TPU
refuses one (up to 64 times the first). Run with libtpu on the path and
JAX_PLATFORMS=cpu (fit_larger.py sets both)."""

from __future__ import annotations

from fit_anchor import initialised, parse_args, tokens

args = parse_args([])
model, state = initialised(args)
batch = args.batch
while batch <= 64 * args.batch:
    try:
        model["step"].lower(state, tokens(model, args, batch)).compile()
    except Exception:  # (XLA:TPU's refusal, as fit meets it)
        print("refused at", batch)
        break
    print("compiled at", batch)
    batch *= 2
