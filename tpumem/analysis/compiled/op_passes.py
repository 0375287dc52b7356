"""Which pass of a training step an op of a compiled program belongs to, from the
name its framework gave it in XLA's metadata: a forward value live in the
backward pass is an activation kept for it (what rematerialization recomputes
instead); a backward value is a gradient or a step toward one.

JAX names an op by the transformations it is under: `jvp(...)` for the forward
pass of a differentiated function, `transpose(jvp(...))` for its backward pass
(jax/_src/interpreters/ad.py names them so). TensorFlow puts a GradientTape's
backward ops under the `gradient_tape/` scope. Where a name says neither (an
optimizer's update, PyTorch/XLA's graphs, whose ops carry no such names), the
pass is not known."""

from __future__ import annotations

FORWARD, BACKWARD = "forward", "backward"
TAPE = "gradient_tape/"


def op_pass(op_name: str, tape: bool = False) -> str | None:
    """FORWARD, BACKWARD or None; `tape`: the program has TensorFlow's tape scope,
    so that an op named by no scope of its own is of its forward pass."""
    if "transpose(" in op_name or op_name.startswith(TAPE):
        return BACKWARD
    if "jvp(" in op_name or (tape and op_name):
        return FORWARD
    return None


def has_tape(op_names: list[str]) -> bool:
    return any(name.startswith(TAPE) for name in op_names)
