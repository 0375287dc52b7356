"""Optimizer steps, run outside the op hook of the PyTorch and PyTorch/XLA adapters.

An optimizer's step is most of what a training step calls from Python: 595 of
the 743 calls a step of the transformer example are Adam's updates, one
parameter at a time, and each pays PyTorch's dispatch to the op hook (7 us)
and the hook's tests. A torch.optim optimizer keeps what its step makes in its
state (`optimizer.state`, the framework's own record), and what it updates in
place the book finds at its next look, as it finds every in-place update. So
while such a step runs the hook is off, and after it the book is told what the
step read and kept: each parameter, its gradient and the tensors of its state.

Only torch.optim's own optimizers are run so, and only without a closure (a
closure runs the model inside the step): another optimizer may keep tensors
elsewhere, and its ops go through the hook as every other op does. A step that
raises leaves the hook off on its thread until the next step, sync or the
recording's end, where it is put back (`resume()`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

# The step mark of an optimizer's step, where the script marks none of its own.
OPTIMIZER_STEP = "optimizer step"


class FirstOptimizer:
    """Which optimizer's steps are the training steps: the first to step (a
    GAN's two optimizers make one step a training step)."""

    def __init__(self) -> None:
        self._first: weakref.ref | None = None

    def counts(self, optimizer: Any) -> bool:
        if self._first is None:
            self._first = weakref.ref(optimizer)
        return self._first() is optimizer


# Told of every optimizer step, plain or not: (optimizer, whether it is plain).
StepCall = Callable[[Any, bool], None]


class OptimizerSteps:
    """Takes `mode` off the thread's torch function modes while a plain
    torch.optim step runs, and calls `stepped(optimizer)` after it, before the
    mode is back."""

    def __init__(
        self,
        torch: Any,
        mode: Any,
        stepped: Callable[[Any], None],
        before: StepCall | None = None,
        after: StepCall | None = None,
    ) -> None:
        """`before` and `after`: as every step of a torch.optim optimizer (or a
        subclass's) begins and once it has ended, the mode back; told whether
        the step is plain (run without the mode)."""
        self._c = torch._C
        self._mode = mode
        self._stepped = stepped
        self._before_step = before
        self._after_step = after
        self._off = threading.local()  # .optimizer: whose step took the mode off here
        self._handles: list[Any] = []

    def install(self) -> None:
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self._handles = [
            register_optimizer_step_pre_hook(self._before),
            register_optimizer_step_post_hook(self._after),
        ]

    def remove(self) -> None:
        """The hooks go; on this thread the mode is back if a step left it off."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.resume()

    def resume(self) -> None:
        """If a step on this thread raised, its state goes to the book and the
        mode is back."""
        optimizer = getattr(self._off, "optimizer", None)
        if optimizer is not None:
            self._mode_back(optimizer)

    def _before(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        # The mode is already off here inside another step, or after a step that
        # raised: what that one read and kept so far goes to the book, and this
        # step takes the mode over (or, if it is not plain, puts it back).
        plain = _plain_step(optimizer, args, kwargs)
        if self._before_step is not None:
            self._before_step(optimizer, plain)
        if not plain:
            self.resume()
            return
        taken_by = getattr(self._off, "optimizer", None)
        if taken_by is not None:
            self._stepped(taken_by)
        else:
            c = self._c
            depth = c._len_torch_function_stack()
            # Only when the mode is the innermost: a mode the script entered later stays.
            if not depth or c._get_function_stack_at(depth - 1) is not self._mode:
                return
            c._pop_torch_function_stack()
        self._off.optimizer = optimizer

    def _after(self, optimizer: Any, args: tuple, kwargs: dict) -> None:
        plain = _plain_step(optimizer, args, kwargs)
        try:
            if getattr(self._off, "optimizer", None) is optimizer:
                self._mode_back(optimizer)
            elif plain:  # its ops went through the hook, or some did:
                self._stepped(optimizer)  # a step inside it gave the mode back
        finally:
            if self._after_step is not None:
                self._after_step(optimizer, plain)

    def _mode_back(self, optimizer: Any) -> None:
        self._off.optimizer = None
        try:
            self._stepped(optimizer)  # (its reads of .grad do not go through the mode)
        finally:
            self._c._push_on_torch_function_stack(self._mode)


def _plain_step(optimizer: Any, args: tuple, kwargs: dict) -> bool:
    """A torch.optim optimizer's step without a closure (`args` holds the
    optimizer first, as the step hooks get it)."""
    closure = kwargs.get("closure", args[1] if len(args) > 1 else None)
    return closure is None and type(optimizer).__module__.startswith("torch.optim.")
