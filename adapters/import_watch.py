"""Where a recording starts: when the process imports the framework that holds its
device memory, as the runtime itself finds out, not before.

`tpumem profile`, `tpumem.track`, `%%tpumem` and the pytest markers all wait here
for the framework's import. Nothing of the framework, nor of tpumem beyond its
runner and this module (the standard library alone), is loaded before the script
asks for it: a Keras 3 script that picks its
backend in its first line (`os.environ["KERAS_BACKEND"] = "jax"`) gets that
backend, and a library that imports the framework on the script's behalf (the
Hugging Face Trainer imports torch_xla where it is installed) is recorded.

Which import starts it: the first of the frameworks' modules to run, except
TensorFlow where Keras is set to another backend (its tf.data pipeline imports
TensorFlow, the device memory is the backend's); then the watch waits for that
backend's import. A plain PyTorch recording yields to PyTorch/XLA when the
script imports torch_xla later (YIELDS_TO): the recording starts again, as
PyTorch/XLA's. Only an import that runs a module counts: a library that asks
whether a framework is installed (importlib.util.find_spec) starts nothing.

The standard library only: this module is imported before the script runs.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

# The frameworks' top-level modules, which name their adapters (base.ADAPTER_MODULES)
# and their adapters' modules; follow_boot's copy must stay the standard library's.
FRAMEWORKS = ("jax", "tensorflow", "torch", "torch_xla")
# Keras 3's backends, and the framework whose adapter records each.
KERAS_BACKENDS = {"jax": "jax", "tensorflow": "tensorflow", "torch": "torch"}
# A framework whose recording another one, imported after it, takes over: each
# framework's `imported_by` (its declaration, adapters/<name>/framework.py), here
# as the standard library's data. PyTorch/XLA imports torch and runs on it; a
# script that imports torch first and torch_xla later is a PyTorch/XLA run.
YIELDS_TO = {"torch": ("torch_xla",)}
_KERAS_CONFIG_BYTES = 1 << 16  # a keras.json larger than this is not Keras's

# Called as the framework's module is about to run; returns what to call once it
# has run (the adapter's start), or None.
Begin = Callable[[str], Callable[[], None] | None]


def keras_backend(environ: Any = os.environ) -> str:
    """The backend Keras 3 will choose when it is imported, found as Keras finds it:
    KERAS_BACKEND, else "backend" in keras.json under KERAS_HOME (or ~/.keras),
    else TensorFlow. Read, never created."""
    named = environ.get("KERAS_BACKEND")
    if named:
        return str(named)
    home = environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(home, "keras.json"), "rb") as handle:
            config = json.loads(handle.read(_KERAS_CONFIG_BYTES))
    except (OSError, ValueError):
        return "tensorflow"
    backend = config.get("backend") if isinstance(config, dict) else None
    return backend if isinstance(backend, str) and backend else "tensorflow"


def holds_device_memory(module: str, wanted: str | None, environ: Any = os.environ) -> bool:
    """Whether the import of `module` (one of FRAMEWORKS) starts the recording:
    the framework named (`wanted`), else the first imported, except TensorFlow
    where Keras runs on another backend."""
    if wanted is not None:
        return module == wanted
    if module == "tensorflow":
        return KERAS_BACKENDS.get(keras_backend(environ), "tensorflow") == "tensorflow"
    return True


class ImportWatch(importlib.abc.MetaPathFinder):
    """Calls `begin(framework)` as the framework's module is about to run, once.

    It finds the module's spec through the finders after it on sys.meta_path, and
    lets the loader run the module unchanged; only the loader's exec_module is
    wrapped, for that one call, then put back."""

    def __init__(
        self,
        begin: Begin,
        wanted: str | None = None,
        failed: Callable[[str, BaseException], None] | None = None,
        any_process: bool = False,
        yielded: Callable[[str], None] | None = None,
    ) -> None:
        """`failed(framework, error)`: the framework's own import raised after
        `begin` (its recording holds nothing then). `any_process`: a process
        forked from this one starts its own recording too (--follow); otherwise
        the watch is this process's alone (its trace and status are).
        `yielded(framework)`: the recording of `framework` is to let go, before
        `begin` starts the one it yields to (YIELDS_TO); without it, the first
        recording stays."""
        self._begin = begin
        self._failed = failed
        self._yielded = yielded
        self.wanted = wanted
        self.framework: str | None = None  # the one that started the recording
        self.passed: list[str] = []  # frameworks imported that did not start it
        self._lock = threading.Lock()
        self._pid = None if any_process else os.getpid()

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def remove(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in FRAMEWORKS or not self._waits_for(name):
            return None
        spec = self._spec_elsewhere(name, path, target)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        if getattr(original, "_tpumem_watch", False):
            return spec  # (a loader shared by several modules, wrapped already)
        own = "exec_module" in vars(loader) if hasattr(loader, "__dict__") else False
        watch = self

        def exec_module(module: Any) -> None:
            if getattr(module, "__name__", None) != name:
                return original(module)  # another module of a shared loader
            # Put back before anything runs: a failed import retried runs as plain.
            if own:
                loader.exec_module = original
            else:
                del loader.exec_module
            start = watch._starting(name)
            try:
                original(module)
            except BaseException as error:
                if start is not None and watch._failed is not None:
                    watch._failed(name, error)
                raise
            if start is not None:
                start()

        exec_module._tpumem_watch = True  # type: ignore[attr-defined]
        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):  # a loader that takes no attributes
            return spec
        return spec

    def _spec_elsewhere(self, name: str, path: Any, target: Any) -> Any:
        """The spec the import system would find without this finder."""
        after = False
        for finder in list(sys.meta_path):
            if finder is self:
                after = True
                continue
            if not after:
                continue
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                return spec
        return importlib.machinery.PathFinder.find_spec(name, path) if not after else None

    def _waits_for(self, module: str) -> bool:
        """Whether the import of `module` may still start (or take over) the recording."""
        if self.framework is None:
            return True
        return self._yields(self.framework, module)

    def _yields(self, recorded: str, module: str) -> bool:
        return (
            self.wanted is None
            and self._yielded is not None
            and module in YIELDS_TO.get(recorded, ())
        )

    def _starting(self, module: str) -> Callable[[], None] | None:
        if self._pid is not None and os.getpid() != self._pid:
            return None  # a forked child: the recording is its parent's
        with self._lock:
            before = self.framework
            if before is not None and not self._yields(before, module):
                return None
            if before is None and not holds_device_memory(module, self.wanted):
                self.passed.append(module)
                return None
            self.framework = module
        if before is not None and self._yielded is not None:
            self._yielded(before)
        if not any(self._yields(module, later) for later in YIELDS_TO.get(module, ())):
            self.remove()  # (else it waits on, for the framework this one yields to)
        return self._begin(module)


def imported_frameworks() -> list[str]:
    """The frameworks this process has imported so far."""
    return [name for name in FRAMEWORKS if name in sys.modules]
