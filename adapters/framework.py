"""What an adapter declares of its framework, as plain data: its names, the
import that starts its recording, its allocator's settings and its users' words.

Each adapter's package holds one, `framework.py`'s FRAMEWORK, which imports
neither the framework nor the adapter: the CLI and the profiled process read it
before either loads. The memory settings and the words go into the trace's
header (run_header.py), where the analysis and the reports read them: neither
names a framework.
"""

from __future__ import annotations

from dataclasses import dataclass

from tpumem.trace.framework_words import FrameworkWords
from tpumem.trace.memory_settings import MemorySettings


@dataclass(frozen=True, slots=True)
class Framework:
    name: str  # as --framework names it, and the trace's `framework`
    module: str  # the top-level module whose presence means it is installed
    # Import names in a script that mean it uses this framework.
    import_names: tuple[str, ...]
    memory_settings: MemorySettings
    words: FrameworkWords
    # Frameworks that import this one whether or not it is used (TensorFlow imports
    # JAX where JAX is installed): with one of them, imported is not used.
    imported_by: tuple[str, ...] = ()
