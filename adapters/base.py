"""The adapter contract and the registry of adapters.

An adapter runs inside the profiled process: `start` hooks the framework and
streams events into a TraceWriter, `stop` flushes and detaches. The framework is
imported inside those methods, never when this module is imported, so the CLI
stays light. Adapters for TensorFlow, JAX and PyTorch/XLA register here.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpumem.adapters.import_watch import FRAMEWORKS
from tpumem.adapters.quiet import announce_thread
from tpumem.errors import TpumemError

if TYPE_CHECKING:
    from tpumem.adapters.framework import Framework
    from tpumem.trace.metadata import ProcessInfo
    from tpumem.trace.writer import TraceWriter


@dataclass(frozen=True, slots=True)
class CaptureOptions:
    """How an adapter captures; the same for every framework."""

    sample_interval_s: float = 0.01  # counters (bytes in use, peak) read this often
    chunk_s: float = 1.0  # profiler sessions last this long: what a SIGKILL can lose
    cpu_allocator_events: bool = True  # TensorFlow: a BFC allocator on the CPU
    programs: bool = True  # each compiled program's HLO and buffer assignment (XLA's dump)
    xla_dump_dir: str | None = None  # where XLA dumps them: made and removed by the caller
    stacks: bool = True  # each buffer's Python call stack (else its source line alone)
    native_frames: bool = False  # call stacks keep the libraries' frames, not the user's alone
    # `tpumem fit --gpu` (PyTorch): the script on fake tensors, stopped after this
    # many optimizer steps (0: a real run), as on this GPU (its name), whose cuBLAS
    # and cuBLASLt workspaces are this large.
    fit_steps: int = 0
    fit_gpu: str = ""
    fit_workspace_bytes: int = 0
    fit_lt_workspace_bytes: int = 0


class Adapter(ABC):
    # What the adapter's package declares of its framework (its framework.py);
    # the names below are read from it.
    framework: Framework
    name: str  # the framework's name, as in --framework
    module: str  # the top-level module whose presence means the framework is installed
    # Import names in a script that mean it uses this framework.
    import_names: tuple[str, ...] = ()
    # Frameworks that import this one whether or not it is used (TensorFlow imports
    # JAX where JAX is installed): with one of them, imported is not used.
    imported_by: tuple[str, ...] = ()

    def __init_subclass__(cls, **options: Any) -> None:
        super().__init_subclass__(**options)
        declared = cls.__dict__.get("framework")
        if declared is not None:
            cls.name, cls.module = declared.name, declared.module
            cls.import_names, cls.imported_by = declared.import_names, declared.imported_by

    def __init__(self, options: CaptureOptions) -> None:
        self.options = options
        # The runner's: told which process this is, it names the trace by it.
        self.identified: Callable[[ProcessInfo], str | None] | None = None

    @classmethod
    def is_available(cls) -> bool:
        return importlib.util.find_spec(cls.module) is not None

    @classmethod
    def environment(cls, options: CaptureOptions, current: Mapping[str, str]) -> dict[str, str]:
        """Variables to set in the profiled process before the framework loads."""
        return {}

    @classmethod
    def environment_read(cls) -> bool:
        """Whether this process's framework has already read what `environment()`
        sets, so that setting it now would change nothing. TensorFlow and
        PyTorch/XLA read theirs when their runtime starts."""
        return cls.runtime_started()

    @classmethod
    def runtime_started(cls) -> bool:
        """Whether this process has started the framework's runtime (made a device
        array, a tensor, a variable), not merely imported it: TensorFlow imports
        JAX where JAX is installed, and does not use it."""
        return False

    def identify(self, writer: TraceWriter, process: ProcessInfo, run: str | None = None) -> None:
        """The framework has said which process of its run this is (its word stands
        over the launcher's environment, read at the start): in the metadata, and
        the trace renamed where its name waited for the rank. A framework that
        knows of one process only (no distributed runtime) says nothing: a
        launcher's rank stands, and a lone process has none."""
        if process.count == 1:
            return
        fields: dict[str, Any] = {"process": process}
        if run is not None:
            fields["run"] = run
        problem = self.identified(process) if self.identified is not None else None
        if problem is not None:
            fields["warnings"] = [problem]
        writer.patch_metadata(**fields)

    def prepare(self, writer: TraceWriter) -> None:
        """What must be in place before the framework's module runs. The import
        watch (import_watch.py) calls it as the framework's import begins, then
        `start` once the import is done; `tpumem.track` in a process that has
        the framework already calls both at once."""
        return None  # (most adapters need nothing before the import)

    @abstractmethod
    def start(self, writer: TraceWriter) -> None: ...

    def forget(self) -> None:
        """In a process forked from this one's: let go of the capture, writing
        nothing (its trace is the parent's), and put back what it replaced, so that
        the child's own capture can start."""
        raise TpumemError(
            f"the {self.name} adapter cannot follow a process forked after it started"
        )

    @abstractmethod
    def stop(self) -> None: ...


def set_before_start(adapter: type[Adapter], options: CaptureOptions) -> dict[str, str]:
    """What the adapter's framework must read as it starts (TensorFlow's CPU
    allocator events, JAX's inline CPU runs), set in this process's environment
    where the user has not set it; returns what was set, for the trace to say."""
    import os

    environment = adapter.environment(options, os.environ)
    os.environ.update(environment)
    return environment


def end_recording(adapter: Adapter, writer: TraceWriter, ending: Any) -> None:
    """Stops the adapter, then records how the run ended (an ExitStatus) and closes
    the trace, whatever the adapter's stop raised."""
    try:
        adapter.stop()
    finally:
        writer.patch_metadata(exit=ending, end_time_ns=writer.now_ns())
        writer.close()


class Patches:
    """What an adapter replaced in the framework, put back by `undo` (last first):
    `tpumem.track` stops inside a process that goes on using the framework."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def replace(self, owner: Any, name: str, value: Any) -> Any:
        """Sets `owner.name` to `value`; returns what it was."""
        original = getattr(owner, name)
        setattr(owner, name, value)
        self._undo.append(lambda: setattr(owner, name, original))
        return original

    def on_undo(self, undo: Callable[[], None]) -> None:
        self._undo.append(undo)

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


class Sampler:
    """The thread every adapter reads its framework's counters on: `tick` runs every
    sample interval until `stop`, which waits for the tick under way to end. A tick
    that returns a number of seconds is not run again before they have passed."""

    def __init__(self, name: str, interval_s: float, tick: Callable[[], float | None]) -> None:
        self._interval_s, self._tick = interval_s, tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        # The first error a tick raised. The thread goes on (a sampler that died
        # would stop the samples and the watch for Keras, and print a traceback
        # into the script's stderr); the adapter names it in the trace's warnings.
        self.failure: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        announce_thread()  # what the framework logs on this thread is tpumem's doing
        wait = self._interval_s
        while not self._stop.wait(wait):
            try:
                wait = max(self._interval_s, self._tick() or 0.0)
            except Exception as error:  # any error of a tick: reported once, not fatal
                if self.failure is None:
                    self.failure = f"{type(error).__name__}: {error}"
                wait = self._interval_s

    def warnings(self) -> list[str]:
        """What the trace should say of this sampler's ticks."""
        if self.failure is None:
            return []
        return [f"tpumem's sampler failed at least once ({self.failure}); it went on"]


class Every:
    """`due()`: true at most once every `seconds`, for a sampler's slower chores."""

    def __init__(self, seconds: float) -> None:
        self._seconds, self._last = seconds, -float("inf")

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last < self._seconds:
            return False
        self._last = now
        return True


def on_step_annotation(cls: Any, mark: Callable[[str, int | None], None]) -> Callable[[], None]:
    """Calls `mark(name, step_num)` as each step annotation of a profiler opens (JAX's
    StepTraceAnnotation, TensorFlow's Trace, PyTorch/XLA's StepTrace: each takes a
    name and `step_num=N`; None where it has no integer one); returns what undoes it."""
    original_init = cls.__init__

    def __init__(self: Any, name: str, *args: Any, **kwargs: Any) -> None:
        step = kwargs.get("step_num")
        mark(name, step if isinstance(step, int) and not isinstance(step, bool) else None)
        original_init(self, name, *args, **kwargs)

    cls.__init__ = __init__
    return lambda: setattr(cls, "__init__", original_init)


def mark_numbered_steps(writer: TraceWriter) -> Callable[[str, int | None], None]:
    """A step mark in the trace for each annotation that numbers its step."""

    def mark(name: str, step: int | None) -> None:
        if step is not None:
            writer.mark(name, step=step)

    return mark


_REGISTRY: dict[str, type[Adapter]] = {}
# Each adapter's module, imported when the adapter is first asked for: importing
# tpumem.adapters loads none of them (the profiled process imports this package
# before the script runs, and an adapter's module brings the trace writer, Arrow).
# An adapter is named as its framework's top-level module; its package,
# adapters/<framework>/, holds it in adapter.py.
ADAPTER_MODULES = {name: f"tpumem.adapters.{name}.adapter" for name in FRAMEWORKS}
# What each package declares of its framework (plain data: no adapter, no
# framework loaded): its names, its allocator's settings and its users' words,
# which the trace's header carries for the analysis and the reports to read.
FRAMEWORK_MODULES = {name: f"tpumem.adapters.{name}.framework" for name in FRAMEWORKS}


def declared(name: str) -> Framework | None:
    """What the framework's package declares of it; None for a name no adapter
    records."""
    if name not in FRAMEWORK_MODULES:
        return None
    framework: Framework = importlib.import_module(FRAMEWORK_MODULES[name]).FRAMEWORK
    return framework


def register(adapter: type[Adapter]) -> type[Adapter]:
    _REGISTRY[adapter.name] = adapter
    return adapter


def _registered() -> dict[str, type[Adapter]]:
    for module in ADAPTER_MODULES.values():
        importlib.import_module(module)
    return _REGISTRY


def adapter_names() -> dict[str, str]:
    """Import name -> framework, for every registered adapter."""
    return {module: cls.name for cls in _registered().values() for module in cls.import_names}


def available_adapters() -> list[str]:
    """Registered adapters whose framework is installed."""
    return sorted(name for name, cls in _registered().items() if cls.is_available())


def get_adapter(name: str) -> type[Adapter]:
    if name in ADAPTER_MODULES:
        importlib.import_module(ADAPTER_MODULES[name])
    try:
        adapter = _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(ADAPTER_MODULES))
        raise TpumemError(f"unknown framework {name!r} (adapters: {known})") from None
    if not adapter.is_available():
        raise TpumemError(f"{name} is not installed (pip install 'tpumem[{name}]')")
    return adapter
