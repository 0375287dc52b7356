"""The steps of a custom loop whose step is a `tf.function`: the function whose
trace computed a tape's gradient or applied a Keras optimizer is the training
step, and each later call of it begins a step.

Such a loop marks no steps of its own (no `Trace(..., step_num=N)`), and its
gradient and optimizer hooks run once, while the function traces: without
these marks, what the step under way made is not told from what earlier steps
left, and the variables are read only before the first step. Keras' own
`fit()` is marked by its callbacks (keras_steps.py) and is not counted here.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from tpumem.adapters.base import Patches

_KERAS = "keras."


class FunctionSteps:
    def __init__(self, patches: Patches, began: Callable[[int, bool], None]) -> None:
        self._patches = patches
        # Called on the script's thread with the time a step began (time.time_ns)
        # and whether it begins now (else it began at the first call, which
        # traced the function and told it a step only as it ended).
        self._began = began
        self._calling = threading.local()  # .function: the outermost being called
        self._steps: weakref.WeakSet[Any] = weakref.WeakSet()

    def install(self) -> None:
        from tensorflow.python.eager.polymorphic_function import polymorphic_function

        cls = polymorphic_function.Function
        original, steps = cls.__call__, self

        def call(function: Any, *args: Any, **kwargs: Any) -> Any:
            calling = steps._calling
            if getattr(calling, "function", None) is not None:
                return original(function, *args, **kwargs)  # called inside another
            known, start = False, time.time_ns()
            with contextlib.suppress(Exception):  # (tpumem's marks never raise)
                known = function in steps._steps
                if known:
                    steps._began(start, True)
            calling.function = function
            try:
                return original(function, *args, **kwargs)
            finally:
                calling.function = None
                with contextlib.suppress(Exception):
                    if not known and function in steps._steps:
                        steps._began(start, False)

        self._patches.replace(cls, "__call__", call)

    def traced(self) -> None:
        """A gradient or an optimizer update traced into the function being called:
        that function is a training step (Keras' own are marked by Keras)."""
        function = getattr(self._calling, "function", None)
        python = getattr(function, "_python_function", None)
        if function is None or getattr(python, "__module__", "").startswith(_KERAS):
            return
        with contextlib.suppress(TypeError):  # (a function that takes no weak reference)
            self._steps.add(function)
