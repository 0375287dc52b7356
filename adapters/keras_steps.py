"""Keras' fit() marks no steps in a profile: its training batches are counted where
Keras starts each one (`CallbackList.on_train_batch_begin`), under the TensorFlow
and the JAX adapters. Keras is watched for, not imported: the adapters call
`watch` from their sampler until the script has imported it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from tpumem.adapters.base import Patches
from tpumem.trace.schema import KERAS_STEP
from tpumem.trace.writer import TraceWriter

KERAS_CALLBACKS = "keras.src.callbacks.callback_list"


class KerasSteps:
    def __init__(
        self, writer: TraceWriter, patches: Patches, on_batch: Callable[[Any], None] | None = None
    ) -> None:
        self._writer, self._patches = writer, patches
        self._on_batch = on_batch  # given the model as each batch starts
        self._step = 0
        self.hooked = False

    @property
    def marked(self) -> bool:
        """Whether Keras has started a training batch (its marks are the steps)."""
        return self._step > 0

    def watch(self) -> None:
        """Hooks Keras' callbacks once the script has imported Keras."""
        callbacks = sys.modules.get(KERAS_CALLBACKS)
        if callbacks is None or self.hooked:
            return
        # A module is in sys.modules from the start of its import: seen from this
        # thread while the script's thread still runs its body, it may not hold
        # the class yet. Looked for again at the next tick.
        callback_list = getattr(callbacks, "CallbackList", None)
        original = getattr(callback_list, "on_train_batch_begin", None)
        if callback_list is None or original is None:
            return
        self.hooked = True
        steps = self

        def on_train_batch_begin(self: Any, batch: int, logs: Any = None) -> Any:
            steps._writer.mark(KERAS_STEP, step=steps._step)
            steps._step += 1
            if steps._on_batch is not None:
                model = getattr(self, "model", None)
                if model is not None:
                    steps._on_batch(model)
            return original(self, batch, logs)

        self._patches.replace(callback_list, "on_train_batch_begin", on_train_batch_begin)
