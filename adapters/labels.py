"""Labels the buffer books of the JAX and PyTorch/XLA adapters give their buffers,
so that the two frameworks' breakdowns speak the same words."""

from __future__ import annotations

from collections.abc import Iterable

# Regions: what a buffer is for.
OUTPUT = "output"  # a program's result
INPUT = "input"  # host data put on a device
TEMP = "temp"  # a compiled program's working memory while it runs
FOUND = "array"  # found by a poll, made where no hook runs
PARAMETER = "parameter"  # a model's parameter (torch.nn.Parameter)
GRADIENT = "gradient"  # a parameter's .grad


def shape_text(shape: Iterable[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"
