"""What TensorFlow's buffers are for, from the objects that hold them: the
variables a Keras model and its optimizer keep, the sources a GradientTape
differentiates against, and the gradients it returns.

TensorFlow's allocator events name the op that made each buffer, not whose
buffer it is. So the adapter reads where each variable's buffer is (its address,
through DLPack, as any array library reads it) at moments when the script is
between steps on its own thread: Keras' `on_train_batch_begin`, a step
annotation (`tf.profiler.experimental.Trace(..., step_num=N)`), and each eager
`GradientTape.gradient` and optimizer `apply`. Each buffer newly seen is a
`told` row (device, address, region); the analysis gives the region to the
buffer allocated last at that address before the reading. A variable updated in
place keeps its buffer; one that was copied on write is read anew at the next
moment.

Reading a variable runs a ReadVariableOp: tens of microseconds. The readings
take at most BUDGET of the run's time since the first; a moment past it is
skipped.
"""

from __future__ import annotations

import ctypes
import sys
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from tpumem.adapters.base import Patches
from tpumem.adapters.book_rows import GRADIENT, OPTIMIZER, PARAMETER, STATE
from tpumem.adapters.tensorflow.devices import device_name
from tpumem.trace.schema import TOLD
from tpumem.trace.writer import TraceWriter

BUDGET = 0.02  # of the run's time, at most, spent reading where variables are
_KERAS_OPTIMIZER = "keras.src.optimizers.base_optimizer"
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class VariableKinds:
    def __init__(
        self, writer: TraceWriter, patches: Patches, tf: Any, updated: Callable[[], None]
    ) -> None:
        self._writer = writer
        self._updated = updated  # called as each eager optimizer update ends
        self._patches = patches
        self._tf = tf
        self._to_dlpack = tf.experimental.dlpack.to_dlpack
        # id(variable) -> (a weak reference to it, its region, the address last told)
        self._known: dict[int, tuple[Any, str, int | None]] = {}
        self._spent_s = 0.0
        self._first: float | None = None
        self.hooked_keras = False

    # -- hooks -------------------------------------------------------------------

    def install(self) -> None:
        """Hooks GradientTape.gradient (TensorFlow is imported: the adapter runs)."""
        from tensorflow.python.eager import backprop, context

        original, kinds = backprop.GradientTape.gradient, self

        def gradient(tape: Any, target: Any, sources: Any, *args: Any, **kwargs: Any) -> Any:
            grads = original(tape, target, sources, *args, **kwargs)
            if context.executing_eagerly():
                kinds.learn(_flat(sources), PARAMETER)
                kinds.tell_now(grads=_flat(grads))
            else:  # traced into a tf.function: its variables are the parameters
                kinds.learn(_flat(sources), PARAMETER)
            return grads

        self._patches.replace(backprop.GradientTape, "gradient", gradient)

    def watch(self) -> None:
        """Hooks Keras' optimizers once the script has imported Keras."""
        module = sys.modules.get(_KERAS_OPTIMIZER)
        optimizer = getattr(module, "BaseOptimizer", None)
        original = getattr(optimizer, "apply", None)
        if self.hooked_keras or original is None:
            return
        self.hooked_keras = True
        kinds, context = self, self._tf.executing_eagerly

        def apply(optimizer: Any, grads: Any, trainable_variables: Any = None) -> Any:
            result = original(optimizer, grads, trainable_variables)
            kinds.optimizer(optimizer, trainable_variables)
            if context():
                kinds.tell_now()
                kinds._updated()
            return result

        self._patches.replace(optimizer, "apply", apply)

    def model(self, model: Any) -> None:
        """A Keras model at the start of a training batch: its variables by role."""
        try:
            self.learn(model.trainable_variables, PARAMETER)
            self.learn(model.non_trainable_variables, STATE)
            self.learn(getattr(model, "metrics_variables", ()), STATE)
            optimizer = getattr(model, "optimizer", None)
            if optimizer is not None:
                self.optimizer(optimizer, None)
        except Exception:  # a model half built, a subclass that raises: told later
            return
        self.tell_now()

    def optimizer(self, optimizer: Any, trainable: Any) -> None:
        """An optimizer's own variables (its slots, step count, learning rate),
        and the variables it trains."""
        with_params = set()
        if trainable is not None:
            with_params = {id(v) for v in _flat(trainable)}
            self.learn(_flat(trainable), PARAMETER)
        self.learn((v for v in optimizer.variables if id(v) not in with_params), OPTIMIZER)

    # -- telling -----------------------------------------------------------------

    def learn(self, variables: Iterable[Any], region: str) -> None:
        known = self._known
        for variable in variables:
            value = _tf_variable(variable)
            if value is None or id(value) in known:
                continue
            try:
                known[id(value)] = (weakref.ref(value), region, None)
            except TypeError:
                continue

    def tell_now(self, grads: Iterable[Any] = ()) -> None:
        """Tells where each known variable's buffer (and each gradient) is now,
        unless reading them has had its share of the run's time."""
        started = time.perf_counter()
        if self._first is None:
            self._first = started
        elif self._spent_s > BUDGET * (started - self._first):
            return
        try:
            self._tell(grads)
        finally:
            self._spent_s += time.perf_counter() - started

    def _tell(self, grads: Iterable[Any]) -> None:
        known = self._known
        for key, (ref, region, told) in list(known.items()):
            variable = ref()
            if variable is None:
                del known[key]
                continue
            where = self._where(variable)
            if where is not None and where[1] != told:
                known[key] = (ref, region, where[1])
                self._row(*where, region)
        for gradient in grads:
            if gradient is not None and hasattr(gradient, "device"):
                where = self._where(gradient)
                if where is not None:
                    self._row(*where, GRADIENT)

    def _where(self, value: Any) -> tuple[str, int, int] | None:
        """(device, address, bytes) of a variable's or a tensor's buffer."""
        try:
            # A variable's value() reads it: a tensor on the variable's own buffer.
            tensor = value.value() if hasattr(value, "handle") else value
            capsule = self._to_dlpack(tensor)
            pointer = _get_pointer(capsule, b"dltensor")
            address = ctypes.c_void_p.from_address(pointer).value
            size = int(value.shape.num_elements() or 0) * value.dtype.size
            device = device_name(value.device)
        except Exception:  # a string, a resource, a sparse or a deleted value
            return None
        return (device, address, size) if address else None

    def _row(self, device: str, address: int, size: int, region: str) -> None:
        self._writer.record(TOLD, device=device, address=address, bytes=size, region=region)


def _tf_variable(variable: Any) -> Any:
    """The tf.Variable of a Keras variable (`.value`), or the variable itself."""
    value = getattr(variable, "value", None)
    if value is not None and not callable(value) and hasattr(value, "handle"):
        return value
    return variable if hasattr(variable, "handle") else None


def _flat(values: Any) -> list[Any]:
    if values is None:
        return []
    if isinstance(values, dict):
        values = list(values.values())
    if isinstance(values, (list, tuple)):
        return [leaf for value in values for leaf in _flat(value)]
    return [values]
