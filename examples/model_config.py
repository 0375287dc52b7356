"""The reference models, the same in every framework: sizes, flags and the
parameter count each framework's version must print.

MLP: `layers` hidden layers of `width` units (dense + bias, GELU with the tanh
approximation), then a dense layer to `classes` logits; softmax cross-entropy on
random inputs and labels.

Transformer (decoder-only, pre-norm): token embedding [vocab, width] plus learned
positions [seq, width]; per block, layer norm (scale, bias), causal multi-head
self-attention (q, k, v and output projections, each width x width with bias),
residual, layer norm, MLP width -> 4 width -> width with GELU (tanh) and biases,
residual; a final layer norm and an unbiased head to `vocab` logits; next-token
cross-entropy on random tokens.

Both: float32, weights drawn from N(0, 0.02), biases 0, norm scales 1; Adam with
lr 1e-3, betas (0.9, 0.999), eps 1e-8; a fixed random batch, `steps` steps.
This module imports no framework.
"""

from __future__ import annotations

import argparse
import json

DEFAULTS = {
    "mlp": {"width": 512, "layers": 4, "batch": 64, "classes": 10, "steps": 20},
    "transformer": {
        "width": 128,
        "layers": 2,
        "heads": 4,
        "batch": 16,
        "seq": 64,
        "vocab": 512,
        "steps": 20,
    },
}
LEARNING_RATE = 1e-3
BETAS = (0.9, 0.999)
EPSILON = 1e-8
INIT_STDDEV = 0.02


def parse_args(
    model: str,
    description: str | None,
    argv: list[str] | None = None,
    jit_compile: bool = False,
) -> argparse.Namespace:
    """The model's flags; `jit_compile`: also --jit-compile, for TensorFlow, whose
    tf.function runs its graph op by op unless told to compile it with XLA (JAX
    and PyTorch/XLA always compile their steps with XLA)."""
    parser = argparse.ArgumentParser(description=description)
    for name, value in DEFAULTS[model].items():
        parser.add_argument(f"--{name}", type=int, default=value)
    parser.add_argument("--seed", type=int, default=0)
    if jit_compile:
        parser.add_argument(
            "--jit-compile",
            action="store_true",
            help="compile the training step with XLA: tf.function(jit_compile=True)",
        )
        parser.add_argument(
            "--no-step-marks",
            action="store_true",
            help="mark no steps for profilers (as most custom loops do)",
        )
    return parser.parse_args(argv)


def mlp_parameters(width: int, layers: int, classes: int, **_: int) -> int:
    return layers * (width * width + width) + width * classes + classes


def transformer_parameters(width: int, layers: int, seq: int, vocab: int, **_: int) -> int:
    norms = 2 * (2 * width)
    attention = 4 * (width * width + width)
    mlp = (width * 4 * width + 4 * width) + (4 * width * width + width)
    embeddings = vocab * width + seq * width
    return embeddings + layers * (norms + attention + mlp) + 2 * width + width * vocab


def parameter_count(model: str, args: argparse.Namespace) -> int:
    count = mlp_parameters if model == "mlp" else transformer_parameters
    return count(**vars(args))


def report(framework: str, model: str, args: argparse.Namespace, **figures: object) -> None:
    """The example's result, one JSON line (tests and benchmarks read it)."""
    print(json.dumps({"framework": framework, "model": model, **vars(args), **figures}))
