"""The adapter contract and the registry of adapters.

An adapter runs inside the profiled process: `start` hooks the framework and
streams events into a TraceWriter, `stop` flushes and detaches. The framework is
imported inside those methods, never when this module is imported, so the CLI
stays light. Adapters for TensorFlow, JAX and PyTorch/XLA register here.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpumem.errors import TpumemError

if TYPE_CHECKING:
    from tpumem.trace.writer import TraceWriter


@dataclass(frozen=True, slots=True)
class CaptureOptions:
    """How an adapter captures; the same for every framework."""

    sample_interval_s: float = 0.01  # counters (bytes in use, peak) read this often
    chunk_s: float = 1.0  # profiler sessions last this long: what a SIGKILL can lose
    cpu_allocator_events: bool = True  # TensorFlow: a BFC allocator on the CPU


class Adapter(ABC):
    name: str  # the framework's name, as in --framework
    module: str  # the top-level module whose presence means the framework is installed
    # Import names in a script that mean it uses this framework.
    import_names: tuple[str, ...] = ()

    def __init__(self, options: CaptureOptions) -> None:
        self.options = options

    @classmethod
    def is_available(cls) -> bool:
        return importlib.util.find_spec(cls.module) is not None

    @classmethod
    def environment(cls, options: CaptureOptions, current: Mapping[str, str]) -> dict[str, str]:
        """Variables to set in the profiled process before the framework loads."""
        return {}

    @abstractmethod
    def start(self, writer: TraceWriter) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...


_REGISTRY: dict[str, type[Adapter]] = {}


def register(adapter: type[Adapter]) -> type[Adapter]:
    _REGISTRY[adapter.name] = adapter
    return adapter


def adapter_names() -> dict[str, str]:
    """Import name -> framework, for every registered adapter."""
    return {module: cls.name for cls in _REGISTRY.values() for module in cls.import_names}


def available_adapters() -> list[str]:
    """Registered adapters whose framework is installed."""
    return sorted(name for name, cls in _REGISTRY.items() if cls.is_available())


def get_adapter(name: str) -> type[Adapter]:
    try:
        adapter = _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none yet"
        raise TpumemError(f"unknown framework {name!r} (adapters: {known})") from None
    if not adapter.is_available():
        raise TpumemError(f"{name} is not installed (pip install 'tpumem[{name}]')")
    return adapter
