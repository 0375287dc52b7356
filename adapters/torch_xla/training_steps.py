"""PyTorch/XLA's training steps, counted as the framework's own step tracing
counts them, not as syncs (its examples sync several times a step).

Where the script marks its steps (`xp.StepTrace`, `torch_xla.step()`), those
are the steps. Otherwise an optimizer's `step()` is: the first optimizer to step
is counted, so that a GAN's two optimizers still make one step. A step is marked
as its optimizer step begins; on a lazy framework the graph of a training step
runs at the sync that follows, so its buffers fall inside the step they belong
to. Once the script marks a step itself, optimizer steps no longer count.
"""

from __future__ import annotations

from typing import Any

from tpumem.adapters.base import on_step_annotation
from tpumem.adapters.optimizer_steps import OPTIMIZER_STEP, FirstOptimizer
from tpumem.trace.writer import TraceWriter

SYNC_MARK = "sync"  # a torch_xla.sync() / xm.mark_step(): no step number
STEP_TRACE = "StepTrace"
STEP_CONTEXT = "torch_xla.step()"


class TrainingSteps:
    def __init__(self, writer: TraceWriter) -> None:
        self.writer = writer
        self.count = 0
        self.source: str | None = None  # what the steps were counted from
        self._optimizer = FirstOptimizer()
        self._undo: list[Any] = []

    def explicit(self, name: str, number: Any = None) -> None:
        """A step the script marked; its own number where it gave one."""
        if self.source != STEP_TRACE or name == STEP_TRACE:
            self.source = name
        step = number if isinstance(number, int) else self.count
        self.writer.mark(name, step=step)
        self.count = step + 1

    def optimizer_step(self, optimizer: Any) -> None:
        if self.source in (STEP_TRACE, STEP_CONTEXT):
            return
        if not self._optimizer.counts(optimizer):
            return
        self.source = OPTIMIZER_STEP
        self.writer.mark(OPTIMIZER_STEP, step=self.count)
        self.count += 1

    def install(self, torch: Any, torch_xla: Any) -> None:
        from torch.optim.optimizer import register_optimizer_step_pre_hook
        from torch_xla.debug import profiler

        handle = register_optimizer_step_pre_hook(
            lambda optimizer, args, kwargs: self.optimizer_step(optimizer)
        )
        self._undo.append(handle.remove)
        steps = self
        self._undo.append(
            on_step_annotation(profiler.StepTrace, lambda _, step: steps.explicit(STEP_TRACE, step))
        )
        original_step = torch_xla.step

        def step() -> Any:
            steps.explicit(STEP_CONTEXT)
            return original_step()

        step.__doc__ = original_step.__doc__
        for module in (torch_xla, torch_xla.torch_xla):
            if getattr(module, "step", None) is original_step:
                module.step = step
                self._undo.append(lambda module=module: setattr(module, "step", original_step))

    def remove(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo = []
