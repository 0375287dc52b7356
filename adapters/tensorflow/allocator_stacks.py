"""Call stacks for TensorFlow's buffers, whose allocator events (from the
profiler) carry an op name and a time but no Python frame.

The cheapest joins TensorFlow allows, with no op callback (an op callback sends
every eager op off its C++ fast path):
- Every op and function run from Python goes through `pywrap_tfe`'s
  `TFE_Py_FastPathExecute` (eager ops) or `TFE_Py_Execute` (functions, and eager
  ops off the fast path), looked up on the module at each call. The adapter wraps
  them to note each call's window and the stack that made it: an allocation
  inside a window was made by that call (the way host_transfers.py labels copies).
- A `tf.function`'s graph keeps, for each op, the Python stack that built it
  (`Operation.traceback`, recorded by TensorFlow anyway). When a function is made
  (`atomic_function.from_func_graph`), the adapter keeps each op's frames inside
  the function's body: what lies past the stack that was tracing it. An
  allocation in a function's window whose op (the node's name) is one of its ops,
  or of a function it calls, gets the call's stack followed by the op's frames
  in the body: the line of `tf.matmul` inside `train_step`, called from the loop.
  Ops that Grappler made or renamed keep the call's stack.
"""

from __future__ import annotations

import collections
import json
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from tpumem.adapters.base import Patches
from tpumem.adapters.call_stacks import CallStacks, NamedFrame, Where
from tpumem.trace.arrow_arrays import dictionary_codes, equal_to, filled
from tpumem.trace.schema import ALLOC, OP_STACKS

# An op Grappler rewrote is named "<Optimizer>/<Rewrite>_<the op's name>".
_GRAPPLER_NAME = re.compile(r"[A-Za-z]+Optimizer/[A-Za-z0-9]+_(.+)")
# A call's window on the trace clock: (start, end, where it was called, the
# function it ran: None for an eager op).
_Window = tuple[int, int, Where, str | None]


class _Function:
    __slots__ = ("frames_by_op", "tracing")

    def __init__(self, tracing: tuple[NamedFrame, ...]) -> None:
        self.tracing = tracing  # the stack that traced it
        self.frames_by_op: dict[str, tuple[NamedFrame, ...]] = {}  # the body's frames


class TfStacks:
    def __init__(self, stacks: CallStacks, origin_ns: int) -> None:
        self.stacks = stacks
        self.origin_ns = origin_ns
        self.labelled = 0
        self.unread_functions = 0  # functions whose ops' stacks could not be read
        self._windows: collections.deque[_Window] = collections.deque()
        self._pending: list[_Window] = []  # drained, kept for the next chunk
        self._functions: dict[str, _Function] = {}
        self._op_owner: dict[str, str] = {}  # an op's name -> a function that has it
        self._joins: dict[tuple, Where] = {}  # (call's stack id, function, op) -> Where
        self._lock = threading.Lock()

    def install(self, patches: Patches) -> None:
        from tensorflow.python import pywrap_tfe
        from tensorflow.python.eager.polymorphic_function import atomic_function

        for name, function_at in (
            ("TFE_Py_FastPathExecute", None),
            ("TFE_Py_Execute", 2),
            ("TFE_Py_ExecuteCancelable", 2),
        ):
            original = getattr(pywrap_tfe, name, None)
            if original is not None:
                patches.replace(pywrap_tfe, name, self._timed(original, function_at))
        original_from_graph = atomic_function.from_func_graph

        def from_func_graph(name: Any, graph: Any, *args: Any, **kwargs: Any) -> Any:
            made = original_from_graph(name, graph, *args, **kwargs)
            try:
                function = self._traced(name, graph, sys._getframe(1))
                attrs = kwargs.get("attrs", args[0] if args else None)
                if _compiled_by_xla(attrs):
                    self._record_op_stacks(function)
            except Exception:  # (a graph TensorFlow changed) its buffers keep the call's stack
                self.unread_functions += 1
            return made

        from_func_graph.__doc__ = original_from_graph.__doc__
        patches.replace(atomic_function, "from_func_graph", from_func_graph)

    def _timed(self, original: Callable[..., Any], function_at: int | None) -> Callable[..., Any]:
        windows, stacks, clock, origin = self._windows, self.stacks, time.time_ns, self.origin_ns

        if function_at is None:

            def eager(*args: Any) -> Any:  # the hot path: an eager op
                start = clock()
                out = original(*args)
                windows.append((start - origin, clock() - origin, stacks(sys._getframe(1)), None))
                return out

            return eager

        def execute(*args: Any) -> Any:
            start = clock()
            out = original(*args)
            name = args[function_at]
            name = name.decode() if isinstance(name, bytes) else name
            windows.append((start - origin, clock() - origin, stacks(sys._getframe(1)), name))
            return out

        return execute

    def _traced(self, name: Any, graph: Any, frame: Any) -> tuple[str, _Function]:
        """Keeps each op's frames inside the body of the function just made."""
        name = name.decode() if isinstance(name, bytes) else str(name)
        stacks = self.stacks
        tracing = stacks.frames_at(frame)
        function = _Function(tracing)
        for op in graph.get_operations():
            frames = stacks.named((f.filename, f.lineno, f.name) for f in op.traceback)
            body = _past(frames, tracing)
            if body:
                function.frames_by_op[op.name] = body
        with self._lock:
            self._functions[name] = function
            for op_name in function.frames_by_op:
                self._op_owner.setdefault(op_name, name)
        return name, function

    def _record_op_stacks(self, traced: tuple[str, _Function]) -> None:
        """For a function XLA compiles (jit_compile): each op's frames in its body,
        as a stack, by op name. XLA's program names its instructions after those
        ops and gives TensorFlow's own line for each (where it made the op), so
        the analysis finds the user's line here instead."""
        name, function = traced
        by_op = {
            op: stack_id
            for op, frames in function.frames_by_op.items()
            if (stack_id := self.stacks.intern(frames)[1]) is not None
        }
        if by_op:
            text = json.dumps({"function": name, "stacks": by_op})
            self.stacks.record(OP_STACKS, op=name, text=text)

    def _op_frames(self, function: str, op: str) -> tuple[NamedFrame, ...]:
        """The frames of `op` below a call of `function`: its own op's body
        frames, or those of a function it calls (with the calling frames)."""
        called = self._functions.get(function)
        if called is None:
            return ()
        rewritten = _GRAPPLER_NAME.fullmatch(op)
        if rewritten is not None:
            op = rewritten[1]
        frames = called.frames_by_op.get(op)
        if frames is not None:
            return frames
        owner = self._functions.get(self._op_owner.get(op, ""))
        if owner is None or owner is called:
            return ()
        # The frames between the two functions' calls, then the op's own.
        return _past(owner.tracing, called.tracing) + owner.frames_by_op[op]

    def label(self, columns: dict[str, Any]) -> dict[str, Any]:
        """A chunk's columns, with each allocation made inside a call given the
        call's stack (and, in a function, its op's frames)."""
        while self._windows:
            self._pending.append(self._windows.popleft())
        windows = self._pending
        if not windows or not columns:
            return columns
        windows.sort(key=lambda w: w[0])
        kind = columns["kind"]
        allocs = equal_to(kind, ALLOC)
        times = np.asarray(columns["time_ns"])
        starts = np.fromiter((w[0] for w in windows), np.int64, len(windows))
        ends = np.fromiter((w[1] for w in windows), np.int64, len(windows))
        # Calls made from several threads may overlap: an event is given the
        # latest call that began before it, if it has not ended.
        index = np.searchsorted(starts, times, side="right") - 1
        inside = allocs & (index >= 0)
        inside[inside] &= times[inside] <= ends[index[inside]]
        rows = np.flatnonzero(inside)
        if len(rows):
            columns = self._labelled(columns, rows, index[rows], windows)
        if len(times):  # later chunks start after this one's events
            last = int(times.max())
            self._pending = [w for w in windows if w[1] >= last]
        return columns

    def _labelled(
        self, columns: dict[str, Any], rows: np.ndarray, calls: np.ndarray, windows: list[_Window]
    ) -> dict[str, Any]:
        """Labels `rows`, made inside `calls` (indices into `windows`), in numpy: a
        chunk holds tens of thousands of events, labelled on a thread that shares the
        GIL with the training loop. Each step's call of a function comes from the
        same line, so the calls are first grouped by (stack, function), and the
        labels are looked up once per group and op, not per call or per row."""
        count = len(np.asarray(columns["time_ns"]))
        op_codes, op_names = _codes(columns.get("op"), count)
        used, call_of_row = np.unique(calls, return_inverse=True)
        groups: dict[tuple[Where, str | None], int] = {}
        group_of_call = np.array(
            [groups.setdefault(windows[call][2:], len(groups)) for call in used.tolist()],
            np.int64,
        )
        width = len(op_names) + 1
        pairs, pair_of_row = np.unique(
            group_of_call[call_of_row] * width + op_codes[rows] + 1, return_inverse=True
        )
        keys = list(groups)
        stack_of_pair = np.empty(len(pairs), np.int64)
        source_of_pair: list[str | None] = []
        with self._lock:
            for i, pair in enumerate(pairs.tolist()):
                group, code = divmod(pair, width)
                where, function = keys[group]
                if function is not None and code:
                    where = self._joined(where, function, op_names[code - 1])
                stack_of_pair[i] = -1 if where[1] is None else where[1]
                source_of_pair.append(where[0])
        self.labelled += len(rows)
        # A host copy's labels (host_transfers.py) came first and stay.
        stacks = _ids(columns.get("stack"), count)
        free = stacks[rows] < 0
        stacks[rows[free]] = stack_of_pair[pair_of_row[free]]
        sources, names = _codes(columns.get("source"), count)
        code_of: dict[str, int] = {}
        for code, name in enumerate(names):
            code_of.setdefault(name, code)
        for name in source_of_pair:
            if name is not None and name not in code_of:
                code_of[name] = len(names)
                names.append(name)
        source_of_pair_code = np.array(
            [-1 if name is None else code_of[name] for name in source_of_pair], np.int64
        )
        free_rows, free_pairs = rows[free], pair_of_row[free]
        unset = sources[free_rows] < 0
        sources[free_rows[unset]] = source_of_pair_code[free_pairs[unset]]
        labelled = dict(columns)
        labelled["stack"] = pa.array(stacks, pa.int64(), mask=stacks < 0)
        labelled["source"] = pa.DictionaryArray.from_arrays(
            pa.array(sources.astype(np.int32), mask=sources < 0), pa.array(names, pa.string())
        )
        return labelled

    def _joined(self, where: Where, function: str, op: str) -> Where:
        """The call's stack followed by the op's frames in the function's body."""
        key = (where[1], function, op)
        found = self._joins.get(key)
        if found is None:
            inner = self._op_frames(function, op)
            found = self.stacks.intern(self.stacks.frames(where[1]) + inner) if inner else where
            self._joins[key] = found
        return found


def _compiled_by_xla(attrs: Any) -> bool:
    """Whether a function's attributes ask XLA to compile it (`jit_compile=True`)."""
    value = attrs.get("_XlaMustCompile") if isinstance(attrs, dict) else None
    return bool(getattr(value, "b", value)) if value is not None else False


def _past(frames: tuple[NamedFrame, ...], prefix: tuple[NamedFrame, ...]) -> tuple:
    """`frames` after what they share with `prefix` from the outermost frame on."""
    shared = 0
    for ours, theirs in zip(frames, prefix, strict=False):
        if ours != theirs:
            break
        shared += 1
    return frames[shared:]


def _codes(column: Any, count: int) -> tuple[np.ndarray, list[Any]]:
    """A string column's codes (-1: null) and values."""
    if column is None:
        return np.full(count, -1, np.int64), []
    if not isinstance(column, pa.DictionaryArray):
        column = pa.array(column, pa.string()).dictionary_encode()
    codes, values = dictionary_codes(column)
    return codes.astype(np.int64), values


def _ids(column: Any, count: int) -> np.ndarray:
    """An id column's values (-1: null), in an array of their own."""
    if column is None:
        return np.full(count, -1, np.int64)
    if not isinstance(column, pa.Array):
        column = pa.array(column, pa.int64())
    return filled(column, -1).astype(np.int64)  # (astype copies: the buffer is read only)
