"""Framework adapters, installed as `tpumem.adapters`. Each adapter imports its
framework only inside the profiled process (see base.py)."""

from tpumem.adapters.base import Adapter, available_adapters, get_adapter, register

__all__ = ["Adapter", "available_adapters", "get_adapter", "register"]
