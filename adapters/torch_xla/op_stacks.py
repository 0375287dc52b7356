"""Call stacks for PyTorch/XLA's tensors, captured by PyTorch itself.

The op hook runs for every op the script calls outside an optimizer step
(about 150 a step of the transformer example), and most tensors it sees die
before a graph materializes them. So at the op it keeps what PyTorch's
`gather_traceback` takes in C++ (each frame's code object and offset: 3.9 us at
the example's ops, against 11.3 us for the walk in Python; what
`torch.cuda.memory._record_memory_history` keeps per allocation), and the book
names only the stacks of the tensors it enters, at each look, in one
`symbolize_tracebacks` call. Neither holds a frame, so no
tensor lives longer for being seen.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tpumem.adapters.call_stacks import CallStacks, Where


class TorchStacks:
    """`capture()` at an op; `places(captured)` -> their Where, at a look."""

    def __init__(self, stacks: CallStacks) -> None:
        from torch._C._profiler import gather_traceback, symbolize_tracebacks

        self.capture: Callable[[], Any] = functools.partial(gather_traceback, True, False, False)
        self._symbolize = symbolize_tracebacks
        self._stacks = stacks

    def places(self, captured: list[Any]) -> list[Where]:
        """The Where of each captured stack (one given as a Where stays so)."""
        pending = [c for c in captured if type(c) is not tuple]
        if not pending:
            return captured
        named = iter(self._symbolize(pending))
        return [c if type(c) is tuple else self._stacks.captured(next(named)) for c in captured]
