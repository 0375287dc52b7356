"""What each buffer of plain PyTorch is for, from PyTorch's own objects: a
module's parameters and buffers, a parameter's `.grad`, an optimizer's state,
and the tensors a model is called with. Each is told by its storage's address
at the time it is seen (a `told` row): the analysis gives the region to the
buffer at that address then (analysis/kinds.py), so no name decides a kind.

- Modules: a global forward pre-hook sees each call of a module; a call that
  no other module's call encloses, of a module that has parameters, is the
  model's: its parameters and buffers (the first time), and the tensors it is
  called with that no op made (no `grad_fn`: data, each call: the inputs).
  PyTorch's global hook sees positional arguments only: a batch passed by
  keyword (`model(input_ids=...)`) is not told. A loss module's call (no
  parameters) tells nothing: its arguments are the model's outputs.
- Optimizers: as a torch.optim optimizer's step begins (any subclass's, with a
  closure too), its parameters and their gradients; after it, its state (what
  `optimizer.state` holds: Adam's moments and step counts).

A tensor told once (a parameter, a state tensor) is told again only where its
storage moved: kept by the tensor, not by its address, which the C library
reuses for a new model's tensors.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from tpumem.adapters.book_rows import GRADIENT, INPUT, OPTIMIZER, PARAMETER, STATE
from tpumem.adapters.optimizer_steps import OPTIMIZER_STEP, FirstOptimizer
from tpumem.trace.schema import TOLD
from tpumem.trace.writer import TraceWriter


class ObjectKinds:
    def __init__(
        self,
        torch: Any,
        writer: TraceWriter,
        device: str,
        guarded: Callable[[Callable[..., Any]], Callable[..., Any]],
        storage_of: Callable[[Any], tuple[int, int] | None] | None = None,
    ) -> None:
        """`guarded(hook)`: the hook as the script's modules may call it (never raising);
        `storage_of(tensor)`: (address, bytes) of its storage as the trace has it
        (a CPU tensor's own, by default)."""
        self._guarded = guarded
        self._storage = storage_of or _storage
        self._tensor = torch.Tensor
        self._parameter = torch.nn.Parameter
        self._writer = writer
        self._device = device
        self._modules: weakref.WeakSet[Any] = weakref.WeakSet()  # models told of
        # tensor -> (address, bytes, region) as last told; by identity (a tensor's
        # == is elementwise, which a WeakKeyDictionary's lookup would call)
        from torch.utils.weak import WeakIdKeyDictionary

        self._told: Any = WeakIdKeyDictionary()
        self._compiling = torch.compiler.is_compiling
        self.inert = False  # let go where the hooks stay (a forked child): nothing told
        self._depth = 0  # module calls under way
        self._stepper = FirstOptimizer()
        self.steps = 0
        self._handles: list[Any] = []

    def install(self, torch: Any) -> None:
        from torch.nn.modules import module

        self._handles = [
            module.register_module_forward_pre_hook(self._guarded(self._entering)),
            module.register_module_forward_hook(self._guarded(self._left), always_call=True),
        ]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    # -- modules ---------------------------------------------------------------

    def _entering(self, module: Any, args: tuple) -> None:
        if self.inert or self._compiling():
            return
        self._depth += 1
        if self._depth != 1:
            return
        parameters = list(module.parameters())
        if not parameters:
            return
        if module not in self._modules:
            self._modules.add(module)
            for parameter in parameters:
                self._tell_once(parameter, PARAMETER)
            for buffer in module.buffers():
                self._tell_once(buffer, STATE)
        for value in args:
            if (
                isinstance(value, self._tensor)
                and not isinstance(value, self._parameter)
                and value.grad_fn is None
            ):
                self._tell(value, INPUT)

    def _left(self, module: Any, args: tuple, output: Any) -> None:
        if not self.inert and not self._compiling():
            self._depth = max(0, self._depth - 1)

    # -- optimizers ------------------------------------------------------------

    def step_begins(self, optimizer: Any) -> None:
        """Its parameters and their gradients, and the step mark of the first
        optimizer to step (a GAN's two optimizers make one step)."""
        if self.inert:
            return
        self._depth = 0  # (a module call that raised never left)
        if self._stepper.counts(optimizer):
            self._writer.mark(OPTIMIZER_STEP, step=self.steps)
            self.steps += 1
        for group in optimizer.param_groups:
            for parameter in group["params"]:
                self._tell_once(parameter, PARAMETER)
                if parameter.grad is not None:
                    self._tell(parameter.grad, GRADIENT)

    def step_ended(self, optimizer: Any) -> None:
        if self.inert:
            return
        for state in optimizer.state.values():
            for value in state.values() if isinstance(state, dict) else ():
                if isinstance(value, self._tensor):
                    self._tell_once(value, OPTIMIZER)

    # -- told rows -------------------------------------------------------------

    def _tell_once(self, tensor: Any, region: str) -> None:
        """Told where it is not told so already (a parameter keeps its storage
        for the run: told once, not at every step)."""
        storage = self._storage(tensor)
        if storage is None:
            return
        told = (*storage, region)
        try:
            if self._told.get(tensor) == told:
                return
            self._told[tensor] = told
        except TypeError:  # (a tensor that takes no weak reference: told each time)
            pass
        self._write(*told)

    def _tell(self, tensor: Any, region: str) -> None:
        storage = self._storage(tensor)
        if storage is not None:
            self._write(*storage, region)

    def _write(self, address: int, size: int, region: str) -> None:
        if address and size:
            self._writer.record(
                TOLD, device=self._device, address=address, bytes=size, region=region
            )


def _storage(tensor: Any) -> tuple[int, int] | None:
    """(address, bytes) of the storage a CPU tensor views; None for one that has
    none (a meta or sparse tensor, a tensor subclass without storage)."""
    try:
        if not tensor.is_cpu:  # (a CUDA tensor's memory is not what this adapter records)
            return None
        storage = tensor.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except Exception:  # (not a strided tensor with storage: nothing to tell)
        return None
