"""Framework adapters, imported as `tpumem.adapters` (through the link
tpumem/adapters). Importing this package imports no adapter's module and no
framework: it is imported into the profiled process before the script runs, and
each adapter's module is loaded when the adapter is first asked for (base.py)."""

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
