"""Framework adapters, imported as `tpumem.adapters` (through the link
tpumem/adapters). Each adapter imports its framework only inside the profiled
process (see base.py); importing this package registers them all and imports no
framework."""

from tpumem.adapters import jax as _jax  # noqa: F401 - registers
from tpumem.adapters import tensorflow as _tensorflow  # noqa: F401 - registers
from tpumem.adapters import torch_xla as _torch_xla  # noqa: F401 - registers
from tpumem.adapters.base import (
    Adapter,
    CaptureOptions,
    adapter_names,
    available_adapters,
    get_adapter,
    register,
)

__all__ = [
    "Adapter",
    "CaptureOptions",
    "adapter_names",
    "available_adapters",
    "get_adapter",
    "register",
]
