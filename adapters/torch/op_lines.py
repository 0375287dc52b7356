"""The user's line behind each allocation of plain PyTorch.

PyTorch's profiler tells each allocation's time, not the Python that made it
(its own Python tracer records every call, about 17,000 a step of the
transformer example, and reading them costs four times the step). So a torch
function mode sees each torch call the script makes from Python (an op, a
tensor method, an operator, `loss.backward()`), and keeps when it began and
ended and where it was called from; an allocation belongs to the call under
way at its time. A torch.optim step runs outside the mode (optimizer_steps.py)
and is one call of its own, from the line that called `optimizer.step()`.

The two clocks differ: the profiler's is a cycle counter turned into Unix time,
the mode's is `time.time_ns()`; measured apart by about 0.5 us at the edges of
calls, less than the Python between two calls. An allocation outside every call
by up to SLACK_NS belongs to the nearer one.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tpumem.adapters.call_stacks import NOWHERE, CallStacks, Where

# A call: the name of what was called ("linear", "backward", "Adam.step") and
# where the script called it from.
Call = tuple[str | None, Where]
NO_CALL: Call = (None, NOWHERE)

SLACK_NS = 5_000
# Tensor attributes the mode sees that never allocate: not kept as calls.
_NO_MEMORY = frozenset(
    (
        "shape",
        "dtype",
        "device",
        "size",
        "dim",
        "numel",
        "requires_grad",
        "grad_fn",
        "is_leaf",
        "data_ptr",
        "untyped_storage",
        "__get__",
        "stride",
        "is_contiguous",
        "ndim",
        "grad",
    )
)


class OpLines:
    """The calls the mode saw since the last `take`: start, end, Where."""

    def __init__(self, stacks: CallStacks) -> None:
        self.stacks = stacks
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.places: list[Call] = []
        self.thread = threading.get_ident()  # the thread the profiler records
        # False once the recording lets go where the mode stays entered (a mode
        # the script entered after it, a forked child): every call passes through.
        self.recording = True
        self.other_threads = 0  # calls seen on other threads: not in the profile
        # Called once, at the first call on the recorded thread (the profiler's start).
        self.first_call: Callable[[], None] | None = None
        self._open: dict[int, tuple[int, Call]] = {}  # an optimizer's step under way

    def begin_step(self, optimizer: Any) -> None:
        """An optimizer step begins (outside the mode): one call, from its line."""
        if threading.get_ident() == self.thread:
            name = f"{type(optimizer).__name__}.step"
            self._open[id(optimizer)] = (time.time_ns(), (name, self.stacks(sys._getframe(1))))

    def end_step(self, optimizer: Any) -> None:
        opened = self._open.pop(id(optimizer), None)
        if opened is not None:
            self.starts.append(opened[0])
            self.ends.append(time.time_ns())
            self.places.append(opened[1])

    def take(self) -> tuple[np.ndarray, np.ndarray, list[Call]]:
        """The calls so far, in time order; kept no longer here."""
        starts, ends, places = self.starts, self.ends, self.places
        self.starts, self.ends, self.places = [], [], []
        begun = np.array(starts, np.int64)
        order = np.argsort(begun, kind="stable")
        return begun[order], np.array(ends, np.int64)[order], [places[i] for i in order]


def places_of(
    times: np.ndarray, starts: np.ndarray, ends: np.ndarray, places: list[Call]
) -> list[Call]:
    """The call under way at each time (NO_CALL for none)."""
    if not len(starts):
        return [NO_CALL] * len(times)
    before = np.searchsorted(starts, times, side="right") - 1
    inside = (before >= 0) & (times <= ends[np.maximum(before, 0)] + SLACK_NS)
    after = np.minimum(before + 1, len(starts) - 1)
    ahead = ~inside & (starts[after] - SLACK_NS <= times) & (starts[after] >= times)
    chosen = np.where(inside, before, np.where(ahead, after, -1))
    return [places[i] if i >= 0 else NO_CALL for i in chosen.tolist()]


def line_mode(torch: Any, lines: OpLines) -> Any:
    """The torch function mode that keeps each call of the profiler's thread.
    Under torch.compile's tracing it passes every call through: Dynamo inlines a
    mode's __torch_function__, and a frame or thread lookup there would break
    the graph at every op (the compiled code's allocations are the profiler's
    still, at the line that called the compiled function)."""
    from torch.overrides import TorchFunctionMode

    now, frame_at, stacks = time.time_ns, sys._getframe, lines.stacks
    thread, ident = lines.thread, threading.get_ident
    compiling = torch.compiler.is_compiling

    class _Lines(TorchFunctionMode):
        def __torch_function__(
            self, func: Any, types: Any, args: Any = (), kwargs: Any = None
        ) -> Any:
            if compiling() or not lines.recording:
                return func(*args, **(kwargs or {}))
            name = getattr(func, "__name__", None)
            if name in _NO_MEMORY:
                return func(*args, **(kwargs or {}))
            if ident() != thread:
                lines.other_threads += 1
                return func(*args, **(kwargs or {}))
            if lines.first_call is not None:
                first, lines.first_call = lines.first_call, None
                first()
            began = now()
            try:
                return func(*args, **(kwargs or {}))
            finally:
                # (take() swaps the lists: each call looks them up anew)
                try:
                    place = stacks(frame_at(1))
                except Exception:  # (never into the script: the call is kept unplaced)
                    place = NOWHERE
                lines.starts.append(began)
                lines.ends.append(now())
                lines.places.append((name, place))

    return _Lines()
