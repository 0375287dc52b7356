"""TensorFlow's device names as the trace gives them."""

from __future__ import annotations


def device_name(logical_name: str) -> str:
    """'/device:GPU:0' or '/job:localhost/.../device:GPU:0' -> 'GPU:0'."""
    return logical_name.rsplit("device:", 1)[-1]
