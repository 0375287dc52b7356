"""Where JAX makes device arrays, and the hooks that enter them in the buffer book.

Nearly every array JAX makes comes out of a jitted function: `jax.jit` of the
user's code, and the jitted functions behind `jax.numpy` and every eager
primitive (`xla_primitive_callable`). Their calls run in C++ and make arrays
without a Python hook, so `_cpp_pjit`, the one place that makes those functions,
is wrapped: each jitted function comes back as a `JittedFunction` that calls
JAX's own and enters what it returned. `jax.numpy` makes its jitted functions
while `import jax` runs, so the wrap is put in place the moment `jax._src.pjit`
has loaded, before anything else in jax can use it (an import hook).

Host data put on a device (`device_put`) and eager `jit_p` binds are hooked at
their implementations. What slips through is found by the book's
poll of `jax.live_arrays()`.

The Python path that runs a jitted function on a cache miss goes through
`ExecuteReplicated.__call__`: hooked to record each compiled program's memory
analysis once, and the exact run window of that call.

Started in a process where JAX is already in use (`tpumem.track`), the functions
jitted before then run in C++ without a hook. There every call is sent down the
Python path instead (`install_every_call`: no call gets JAX's C++ fast path while
tpumem records), and the hook on `ExecuteReplicated.__call__` enters the arrays
each program returns. Every patch is undone by `uninstall`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.machinery
import json
import os
import re
import sys
import threading
import time
import types
from dataclasses import dataclass
from typing import Any

from tpumem.adapters.base import Patches
from tpumem.adapters.book_rows import INPUT, OUTPUT, TEMP
from tpumem.adapters.call_stacks import CallStacks, Where
from tpumem.adapters.jax.buffer_book import BufferBook, device_name
from tpumem.adapters.jax.tree_kinds import LEARNING_CALLS, OutputKinds
from tpumem.adapters.keras_steps import KerasSteps
from tpumem.trace.schema import PROGRAM
from tpumem.trace.writer import TraceWriter

PJIT_MODULE = "jax._src.pjit"
GLOBAL_ARRAY_MAKERS = (
    "make_array_from_callback",
    "make_array_from_process_local_data",
    "make_array_from_single_device_arrays",
)
_JIT_NAME = re.compile(r"^jit\((.*)\)$")  # JAX names a program after its function


@dataclass(frozen=True, slots=True)
class Program:
    """A compiled program's memory, from XLA's own analysis of it."""

    name: str
    devices: tuple[str, ...]
    temp_bytes: int
    executable: Any  # held so that its id is not reused by another program

    @property
    def shows_temp(self) -> bool:
        """Its temp buffer is shown live while it runs: a single-device program
        with one (the CPU client runs those inline, so the call is the run)."""
        return self.temp_bytes > 0 and len(self.devices) == 1


@dataclass(frozen=True, slots=True)
class _Call:
    program: Program
    start_ns: int
    end_ns: int


class _CallState(threading.local):
    """A thread's hooked calls: `run`, the program the Python path ran last on this
    thread; `wrapped`, the primitive calls under way whose outputs their wrapper
    enters (install_every_call). Class defaults: no getattr on the hot path."""

    run: _Call | None = None
    wrapped = 0


class JaxHooks:
    """Installs the hooks and turns what they see into the book's entries."""

    def __init__(
        self,
        writer: TraceWriter,
        book: BufferBook | None,
        temp_windows: bool,
        stacks: CallStacks,
    ) -> None:
        self.writer = writer
        self.book = book  # None: programs only (the allocator's events hold the buffers)
        self.temp_windows = temp_windows  # run windows observed: place programs' temp
        self.origin = writer.start_time_ns
        self.stacks = stacks
        self.programs: dict[int, Program] = {}
        self.wrapped = 0
        self.calls_running = 0  # hooked calls that donate, under way on any thread
        self.in_flight = 0  # hooked calls under way (their arrays are theirs to enter)
        # Programs run by JAX's Python path, on any thread: a call that sees it
        # unchanged ran on the C++ fast path (a thread-local read saved a call).
        self.python_runs = 0
        self.every_call = False  # every program's outputs entered where it runs
        self.backend_made = False  # the adapter has set `book` (None on a GPU)
        # Steps: the script's own annotations, else Keras' batches, else each call
        # of the first jitted function that donates its arguments (a train step).
        self.annotated = False
        self.keras: KerasSteps | None = None
        self._step_function: str | None = None
        self._step_trains = False  # the step function's outputs hold optimizer state
        self._step_calls = 0
        self.active = True  # False once uninstalled: wrappers still held pass through
        self.patches = Patches()
        self._local = _CallState()
        self._lock = threading.Lock()

    # -- installing ----------------------------------------------------------

    def install_before_import(self) -> bool:
        """Wraps `_cpp_pjit` as soon as JAX defines it; False when jax was
        already imported (functions jitted before then are not wrapped)."""
        module = sys.modules.get(PJIT_MODULE)
        if module is not None:
            self._wrap_pjit(module)
            return False
        finder = _AfterImport(PJIT_MODULE, self._wrap_pjit)
        sys.meta_path.insert(0, finder)

        def forget_finder() -> None:
            if finder in sys.meta_path:
                sys.meta_path.remove(finder)

        self.patches.on_undo(forget_finder)
        return True

    def install_every_call(self) -> None:
        """Sends every jitted call down the Python path while tpumem records: JAX
        gives no call its C++ fast path, and the ones it gave are dropped (its
        compiled programs are kept: nothing compiles again)."""
        from jax._src import pjit

        self.patches.on_undo(_drop_fast_paths)  # after the line below is undone
        self.patches.replace(pjit, "_get_fastpath_data", lambda *args, **kwargs: None)
        _drop_fast_paths()
        self.every_call = True

    def uninstall(self) -> None:
        """Puts back everything the hooks replaced. Functions jitted meanwhile keep
        their wrapper, which from now on only calls JAX's own."""
        self.active = False
        self.patches.undo()

    def install_after_import(self) -> None:
        from jax import tree_util
        from jax._src import dispatch, pjit, source_info_util
        from jax._src.interpreters import pxla

        # The source line JAX keeps in each program's HLO is the innermost frame
        # outside JAX: the user's, not these hooks'.
        here = os.path.dirname(os.path.abspath(__file__))
        for path in {here, os.path.realpath(here)}:
            source_info_util.register_exclusion(path + os.sep)

        self._tree_leaves = tree_util.tree_leaves
        self._tree_flatten = tree_util.tree_flatten
        import numpy

        self._ndarray = numpy.ndarray
        patches = self.patches
        # Hooked before JAX's backend exists (the adapter waits for the script to
        # make it), so that the very call that makes it is seen; on a GPU, where the
        # allocator's events hold the buffers, there is no book and they pass through.
        # Both jax.device_put and the device_put primitive end here.
        impl = dispatch._batched_device_put_impl
        patches.replace(dispatch, "_batched_device_put_impl", self._entering(impl, "device_put"))
        patches.replace(pjit.jit_p, "impl", self._entering(pjit.jit_p.impl, None))
        self._hook_global_arrays()
        original_call, hooks = pxla.ExecuteReplicated.__call__, self

        @functools.wraps(original_call)
        def __call__(self: Any, *args: Any) -> Any:
            start = time.time_ns()
            out = original_call(self, *args)
            end = time.time_ns()
            run = _Call(hooks._program(self), start - hooks.origin, end - hooks.origin)
            hooks._local.run = run
            hooks.python_runs += 1
            if hooks.every_call and not hooks._local.wrapped:
                hooks._ran(run, args, out)
            return out

        patches.replace(pxla.ExecuteReplicated, "__call__", __call__)

    def _hook_global_arrays(self) -> None:
        """What multi-host input pipelines make their global arrays with: each
        process's shards, put on its devices (by a path past device_put)."""
        import jax
        from jax._src import array

        for name in GLOBAL_ARRAY_MAKERS:
            original = getattr(array, name, None)
            if original is None:
                continue
            entering = self._entering(original, name)
            self.patches.replace(array, name, entering)
            if getattr(jax, name, None) is original:
                self.patches.replace(jax, name, entering)

    def _wrap_pjit(self, pjit: types.ModuleType) -> None:
        original, hooks = pjit._cpp_pjit, self

        @functools.wraps(original)
        def _cpp_pjit(fun: Any, jit_info: Any) -> Any:
            jitted = original(fun, jit_info)
            hooks.wrapped += 1
            donates = bool(jit_info.donate_argnums or jit_info.donate_argnames)
            return JittedFunction(jitted, hooks, donates, fun)

        self.patches.replace(pjit, "_cpp_pjit", _cpp_pjit)

    def _entering(self, impl: Any, op: str | None) -> Any:
        """A primitive's implementation that enters the arrays it returns."""
        hooks = self

        @functools.wraps(impl)
        def entering(*args: Any, **params: Any) -> Any:
            start = time.time_ns()
            local = hooks._local
            local.wrapped += 1  # its outputs are entered here
            hooks.in_flight += 1
            try:
                out = impl(*args, **params)
                name = op or params.get("name")
                outs = out if isinstance(out, (list, tuple)) else [out]
                hooks._enter(outs, start - hooks.origin, name, INPUT if op else OUTPUT, 2)
            finally:
                local.wrapped -= 1
                hooks.in_flight -= 1
            return out

        return entering

    # -- what a call made ----------------------------------------------------

    def _program(self, execute: Any) -> Program:
        """The program an ExecuteReplicated runs, recorded the first time."""
        executable = execute.xla_executable
        program = self.programs.get(id(executable))
        if program is not None:
            return program
        with self._lock:
            program = self.programs.get(id(executable))
            if program is None:
                program = self.programs[id(executable)] = self._record_program(execute)
        return program

    def _record_program(self, execute: Any) -> Program:
        executable = execute.xla_executable
        devices = tuple(device_name(d) for d in execute._local_devices)
        analysis: dict[str, Any] = {"name": execute.name, "devices": list(devices)}
        # (A backend that keeps no HLO module: the program joins no HLO.)
        with contextlib.suppress(Exception):
            analysis["module"] = executable.hlo_modules()[0].name
        try:
            stats = executable.get_compiled_memory_stats()
        except Exception as error:  # a backend without the analysis
            analysis["unavailable"] = f"{type(error).__name__}: {error}"
            temp = 0
        else:
            for field in (
                "argument_size_in_bytes",
                "output_size_in_bytes",
                "alias_size_in_bytes",
                "temp_size_in_bytes",
                "generated_code_size_in_bytes",
                "host_argument_size_in_bytes",
                "host_output_size_in_bytes",
                "host_alias_size_in_bytes",
                "host_temp_size_in_bytes",
            ):
                analysis[field.removesuffix("_size_in_bytes") + "_bytes"] = int(
                    getattr(stats, field, 0) or 0
                )
            temp = analysis["temp_bytes"]
        analysis["program_id"] = len(self.programs)
        self.writer.record(PROGRAM, op=execute.name, text=json.dumps(analysis))
        return Program(execute.name, devices, temp, executable)

    def after_call(
        self,
        function: JittedFunction,
        start_ns: int,
        out: Any,
        args: Any,
        kwargs: Any,
        python_runs: int,
        host: int = 0,
    ) -> None:
        """Enters what a call returned; `python_runs`: the count before the call;
        `host`: the bytes of NumPy arguments, copied to the device for the call."""
        book = self.book
        if book is None:
            return
        array_type = book.array_type
        regions = None
        if type(out) is array_type:
            leaves, first = None, out  # one array: entered without a list
        else:
            leaves, treedef = self._tree_flatten(out)
            if not leaves or (
                type(leaves[0]) is not array_type
                and not any(type(leaf) is array_type for leaf in leaves)
            ):
                return  # traced, not run
            first = leaves[0]
            regions = function.kinds.regions(
                out, leaves, treedef, lambda: self._tree_leaves((args, kwargs))
            )
        run = None
        if self.python_runs != python_runs:  # on some thread: this call's if ours and new
            run = self._local.run
            if run is not None and run.start_ns < start_ns - self.origin:
                run = None
        if run is not None:  # the Python path ran: this call's program, timed
            program, shape = run.program, getattr(first, "shape", None)
            if program.shows_temp:
                function.programs[shape] = program
            else:  # (a program of the same output shape compiled before)
                function.programs.pop(shape, None)
            start, end = run.start_ns, run.end_ns
        else:
            start, program = start_ns - self.origin, None
            if self.temp_windows and function.programs:  # the call's window is its run
                program = function.programs.get(getattr(first, "shape", None))
                end = time.time_ns() - self.origin
        if function.donates:
            book.release_deleted(self._tree_leaves((args, kwargs)), start)
        where = self.stacks(sys._getframe(2))
        if leaves is None:
            book.enter_one(first, start, function.__name__, OUTPUT, where)
        else:
            book.enter(leaves, start, function.__name__, OUTPUT, where, regions)
        if program is not None and self.temp_windows:
            self._temp(book, program, start, end, function.__name__, where)
        if host:
            # JAX copies a NumPy argument to the program's device for the call and
            # frees the copy when the call is done: the training batch, in most
            # scripts. On the first output's device (a program of one device).
            devices = first.sharding._device_assignment
            if book is not None and len(devices) == 1:
                ended = time.time_ns() - self.origin if run is None else run.end_ns
                book.add_window(
                    device_name(devices[0]), host, (start, ended), function.__name__, INPUT, where
                )

    def tell_arguments(self, function: JittedFunction, args: Any, kwargs: Any) -> None:
        """What a call's arguments are for, by the objects that hold them: the
        arrays a step is first given were made before any step told them."""
        book = self.book
        if book is None:
            return
        tree = (args, kwargs)
        leaves = self._tree_leaves(tree)
        regions = function.kinds.arguments(leaves, tree)
        if regions is not None:
            book.tell(leaves, regions, time.time_ns() - self.origin)

    def donating_call(self, name: str, trains: bool) -> None:
        """A call of a jitted function that donates its arguments: in Flax/optax
        trainers and Keras, the training step, which marks no step of its own.
        Marked as one where nothing else marks steps (annotations, Keras'
        fit()): the first such function, until one whose outputs hold optimizer
        state (`trains`, tree_kinds.py) is called, which is the step from then
        on (an evaluation function may donate too, and run first)."""
        if self.annotated or (self.keras is not None and self.keras.marked):
            return
        if self._step_function is None or (
            trains and not self._step_trains and name != self._step_function
        ):
            self._step_function, self._step_trains = name, trains
        elif name != self._step_function:
            return
        self.writer.mark(f"{name} (donating jitted call)", step=self._step_calls)
        self._step_calls += 1

    def host_arguments(self, args: Any, kwargs: Any) -> int:
        """The bytes of the NumPy arrays among a call's arguments (0 where there is
        no book: on a GPU the allocator's events hold their device copies). Counted
        also before the backend exists: the call that makes it has a book after.
        Read where scripts pass a batch (an argument, or a value of a dict, list or
        tuple argument), not through the whole tree: a step's state has hundreds
        of leaves, and this is on every call's path."""
        if self.book is None and self.backend_made:
            return 0
        ndarray, total = self._ndarray, 0
        for value in (*args, *kwargs.values()) if kwargs else args:
            kind = type(value)
            if kind is ndarray:
                total += value.nbytes
            elif kind is dict or kind is list or kind is tuple:
                items = value.values() if kind is dict else value
                total += sum(v.nbytes for v in items if type(v) is ndarray)
        return total

    def _ran(self, run: _Call, args: Any, out: Any) -> None:
        """A program that ran outside any wrapper (install_every_call): its
        outputs, the arguments it consumed (donated) and its temporaries."""
        book = self.book
        if book is None:
            return
        if any(type(a) is book.array_type and a.is_deleted() for a in args):
            book.release_deleted(list(args), run.start_ns)
        match = _JIT_NAME.match(run.program.name)
        op = match[1] if match else run.program.name
        where = self.stacks(sys._getframe(2))
        book.enter(list(out), run.start_ns, op, OUTPUT, where)
        if self.temp_windows:
            self._temp(book, run.program, run.start_ns, run.end_ns, op, where)

    def _temp(
        self, book: BufferBook, program: Program, start: int, end: int, op: str, where: Where
    ) -> None:
        """A program's temp buffer, live while it ran (Program.shows_temp)."""
        if program.shows_temp:
            book.add_window(program.devices[0], program.temp_bytes, (start, end), op, TEMP, where)

    def _enter(self, arrays: Any, start: int, op: str | None, region: str, depth: int) -> None:
        book = self.book
        if book is None:
            return
        where = self.stacks(sys._getframe(depth))
        book.enter(list(arrays), start, op, region, where)


class JittedFunction:
    """What `jax.jit` returns while tpumem runs: JAX's own jitted function, whose
    calls enter the arrays they return. Everything else (`lower`, `trace`,
    `eval_shape`, `clear_cache`, attributes) is the wrapped function's."""

    def __init__(self, jitted: Any, hooks: JaxHooks, donates: bool, fun: Any) -> None:
        functools.update_wrapper(self, jitted)
        self._jitted = jitted
        self._hooks = hooks
        self.donates = donates
        self.kinds = OutputKinds(fun)  # what its outputs are for (tree_kinds.py)
        # Its programs whose temp is shown (Program.shows_temp), by the first
        # output's shape: the fast path's calls name no program.
        self.programs: dict[Any, Program] = {}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        hooks = self._hooks
        if not hooks.active or hooks.every_call:
            # (every_call: each program's outputs are entered where it runs)
            return self._jitted(*args, **kwargs)
        python_runs = hooks.python_runs
        donates = self.donates  # (the poll leaves donated arguments to this call)
        host = hooks.host_arguments(args, kwargs)
        if self.kinds.calls < LEARNING_CALLS:
            hooks.tell_arguments(self, args, kwargs)
        if donates:
            hooks.donating_call(self.__name__, self.kinds.trains)
            hooks.calls_running += 1
        hooks.in_flight += 1
        try:
            start = time.time_ns()
            out = self._jitted(*args, **kwargs)
            hooks.after_call(self, start, out, args, kwargs, python_runs, host)
        finally:
            hooks.in_flight -= 1
            if donates:
                hooks.calls_running -= 1
        return out

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # Like JAX's own: a jitted function in a class body is a method.
        return self if instance is None else types.MethodType(self, instance)

    def __getattr__(self, name: str) -> Any:
        if name == "_jitted":  # not set yet (copy, pickle)
            raise AttributeError(name)
        return getattr(self._jitted, name)

    def __repr__(self) -> str:
        return repr(self._jitted)


def _drop_fast_paths() -> None:
    """Empties JAX's C++ caches of jitted calls (as jax.clear_caches does first),
    so each next call takes the Python path once and gets (or not) a fast path."""
    from jax._src import pjit
    from jaxlib import _jax

    pjit._cpp_pjit_cache_fun_only.clear()
    pjit._cpp_pjit_cache_explicit_attributes.clear()
    _jax.PjitFunctionCache.clear_all()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs `patch(module)` right after one module has been executed."""

    def __init__(self, name: str, patch: Any) -> None:
        self.name = name
        self.patch = patch

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader, patch = spec.loader, self.patch
        original_exec = loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            original_exec(module)
            patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
