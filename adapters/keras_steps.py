"""Keras' fit() marks no steps in a profile: its training batches are counted where
Keras starts each one (`CallbackList.on_train_batch_begin`), under the TensorFlow
and the JAX adapters; evaluate()'s and predict()'s batches are marked as their
phases, without a step number (a peak in one is labelled with it). Keras is
watched for, not imported: the adapters call `watch` from their sampler until the
script has imported it."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from typing import Any

from tpumem.adapters.base import Patches
from tpumem.trace.schema import KERAS_EVALUATE, KERAS_PREDICT, KERAS_STEP
from tpumem.trace.writer import TraceWriter

KERAS_CALLBACKS = "keras.src.callbacks.callback_list"
UNJITTED = (
    "Keras trained {} without compiling its step (model.jit_compile is False): its "
    "arrays are each op's, made and freed op by op, with no compiled program to plan "
    "its temporaries; compile(jit_compile=True) where every layer allows it"
)


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
            model = getattr(self, "model", None)
            if steps._step == 1:
                with contextlib.suppress(Exception):
                    steps._say_unjitted(model)
            if steps._on_batch is not None and model is not None:
                with contextlib.suppress(Exception):  # (tpumem's reading never raises)
                    steps._on_batch(model)
            return original(self, batch, logs)

        self._patches.replace(callback_list, "on_train_batch_begin", on_train_batch_begin)
        # evaluate() and predict(): phases, marked without a step number.
        for hook, phase in (
            ("on_test_batch_begin", KERAS_EVALUATE),
            ("on_predict_batch_begin", KERAS_PREDICT),
        ):
            original_hook = getattr(callback_list, hook, None)
            if original_hook is not None:
                self._patches.replace(callback_list, hook, self._marking(original_hook, phase))

    def _say_unjitted(self, model: Any) -> None:
        """Where Keras trains op by op (`jit_compile` False: asked for, or chosen
        by Keras because a layer cannot be compiled, as keras.io's ViT's
        RandomRotation), the report says so: the step's arrays are each op's, and
        no compiled program's plan is there to tell them."""
        if getattr(model, "jit_compile", None) is False:
            self._writer.patch_metadata(warnings=[UNJITTED.format(type(model).__name__)])

    def _marking(self, original: Callable[..., Any], phase: str) -> Callable[..., Any]:
        writer = self._writer

        def on_batch_begin(self: Any, batch: int, logs: Any = None) -> Any:
            writer.mark(phase)
            return original(self, batch, logs)

        return on_batch_begin
