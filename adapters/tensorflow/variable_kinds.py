"""What TensorFlow's buffers are for, from the objects that hold them: the
variables a Keras model and its optimizer keep, the sources a GradientTape
differentiates against, and the gradients it returns.

TensorFlow's allocator events name the op that made each buffer, not whose
buffer it is. So the adapter reads where each variable's buffer is (its address,
through DLPack, as any array library reads it) at moments when the script is
between steps on its own thread: Keras' `on_train_batch_begin`, a step
annotation (`tf.profiler.experimental.Trace(..., step_num=N)`), and each eager
`GradientTape.gradient` and optimizer `apply`. Each reading of each variable is
a `told` row (device, address, region); the analysis gives the region to the
buffer allocated last at that address before the reading. A variable updated in
place keeps its buffer; one that was copied on write is read anew at the next
moment.

Reading a variable runs a ReadVariableOp: about 7 us. The readings take at most
BUDGET of the run's time since the first (and CREDIT_S): a moment reads as many
variables as that allows, on from where the last one stopped. The moment after
the allocator's own peak rose, and the run's end, read them all: what the peak
held is read there (a peak rises a few times in a run).
"""

from __future__ import annotations

import contextlib
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
CREDIT_S = 0.05  # and this much more: the first readings read every variable
# The readings of a variable that check whether a read copies it: the first
# ones, then one in CHECK_EVERY (a sparse op may first read it at any step).
CHECKED_READS = 6
CHECK_EVERY = 8
_KERAS_OPTIMIZER = "keras.src.optimizers.base_optimizer"
_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


class VariableKinds:
    def __init__(
        self,
        writer: TraceWriter,
        patches: Patches,
        tf: Any,
        updated: Callable[[], None],
        peak_moved: Callable[[], bool],
        traced: Callable[[], None] = lambda: None,
    ) -> None:
        self._writer = writer
        self._updated = updated  # called as each eager optimizer update ends
        # Called as a gradient or an update is traced into a tf.function (its step).
        self._traced = traced
        # Whether an allocator's own peak rose since last asked: the reading after
        # a new peak decides what the peak held, and reads every variable.
        self._peak_moved = peak_moved
        self._patches = patches
        self._tf = tf
        self._to_dlpack = tf.experimental.dlpack.to_dlpack
        self._known: dict[int, _Known] = {}  # by id(variable)
        self._copied: set[int] = set()  # ids of variables TensorFlow copies on read
        self._spent_s = 0.0
        self._first: float | None = None
        self._cursor = 0  # where in the known variables the next reading starts
        from tensorflow.python.ops import gen_resource_variable_ops

        self._read = gen_resource_variable_ops.read_variable_op
        self.hooked_keras = False

    # -- hooks -------------------------------------------------------------------

    def install(self) -> None:
        """Hooks GradientTape.gradient (TensorFlow is imported: the adapter runs)."""
        from tensorflow.python.eager import backprop, context

        original, kinds = backprop.GradientTape.gradient, self

        def gradient(tape: Any, target: Any, sources: Any, *args: Any, **kwargs: Any) -> Any:
            grads = original(tape, target, sources, *args, **kwargs)
            with contextlib.suppress(Exception):  # (tpumem's reading never raises)
                kinds.learn(_flat(sources), PARAMETER)
                if context.executing_eagerly():
                    kinds.tell_now(grads=_flat(grads))
                else:  # traced into a tf.function: its variables are the parameters
                    kinds.tell_gradient_ops(_flat(grads), _flat(sources))
                    kinds.tell_outside_function()
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
            with contextlib.suppress(Exception):  # (tpumem's reading never raises)
                kinds.optimizer(optimizer, trainable_variables)
                if context():
                    kinds.tell_now()
                    kinds._updated()
                else:
                    kinds.tell_outside_function()
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
            if value is None or id(value) in known or id(value) in self._copied:
                continue
            try:
                known[id(value)] = _Known(weakref.ref(value), region)
            except TypeError:
                continue

    def tell_gradient_ops(self, grads: list[Any], sources: list[Any]) -> None:
        """A tape's gradients traced into a tf.function: the ops that make them,
        by name (a `told` row each, on its source's device): each call's
        buffers those ops make are the gradients."""
        for gradient, source in zip(grads, sources, strict=False):
            op = getattr(gradient, "op", None)
            name = getattr(op, "name", None)
            device = getattr(_tf_variable(source), "device", None)
            if isinstance(name, str) and device:
                self._writer.record(TOLD, device=device_name(device), op=name, region=GRADIENT)

    def tell_outside_function(self) -> None:
        """While a tf.function traces (its first call): the variables as they are
        before it first runs, read eagerly (a first step's peak holds them)."""
        self._traced()
        with self._tf.init_scope():
            self.tell_now()

    def tell_now(self, grads: Iterable[Any] = (), final: bool = False) -> None:
        """Tells where the known variables' buffers (and the gradients) are now:
        as many variables as the readings' share of the run's time allows, on
        from where the last reading stopped, so that each is read in turn
        (`final`: all of them, the run being over)."""
        started = time.perf_counter()
        if self._first is None:
            self._first = started
        allowance = BUDGET * (started - self._first) + CREDIT_S - self._spent_s
        if final or self._peak_moved():
            allowance = float("inf")
        try:
            self._tell(grads, started + allowance)
        finally:
            self._spent_s += time.perf_counter() - started

    def _tell(self, grads: Iterable[Any], deadline: float) -> None:
        # Every variable read is told, moved or not: a buffer freed and another
        # allocated at the same address in between is a new buffer to tell.
        for gradient in grads:
            if gradient is not None and hasattr(gradient, "device"):
                where = self._where(gradient)
                if where is not None:
                    self._row(where[0], where[1], where[2], GRADIENT)
        known = self._known
        keys = list(known)
        if not keys:
            return
        # Those that moved at their last reading first (a variable copied on
        # write each step moves each step), then the rest in turn.
        start = self._cursor % len(keys)
        turn = keys[start:] + keys[:start]
        movers = [key for key in turn if known[key].moved]
        order = movers + [key for key in turn if not known[key].moved]
        for count, key in enumerate(order):
            if count and time.perf_counter() > deadline:
                self._cursor = start + max(0, count - len(movers))
                return
            self._read_one(key)
        self._cursor = start

    def _read_one(self, key: int) -> None:
        entry = self._known[key]
        variable = entry.ref()
        if variable is None:
            del self._known[key]
            return
        if entry.reads < CHECKED_READS or entry.reads % CHECK_EVERY == 0:
            # Read twice, the first read still held: a variable in TensorFlow's
            # copy-on-read mode (from the first time a sparse op such as
            # tf.gather reads it) gives each read a copy of its own, at another
            # address. Its readings told copies, and each made one: it is read
            # no more, and told once by its size alone (the analysis drops its
            # readings and finds its buffer by its size).
            held = self._where(variable, keep=True)
            again = self._where(variable)
            if held is not None and again is not None and held[1] != again[1]:
                del self._known[key]
                self._copied.add(key)
                self._writer.record(
                    TOLD,
                    device=held[0],
                    bytes=held[2],
                    region=entry.region,
                    text=str(key),
                    dtype=variable.dtype.name,
                )
                return
        where = self._where(variable)
        if where is not None:
            entry.moved = entry.last is not None and where[1] != entry.last
            entry.last = where[1]
            entry.reads += 1
            self._row(where[0], where[1], where[2], entry.region, key, variable.dtype.name)

    def _where(self, value: Any, keep: bool = False) -> Any:
        """(device, address, bytes) of a variable's or a tensor's buffer; with
        `keep`, and the tensor read, which holds the buffer while it lives."""
        try:
            # A variable's read is a tensor on the variable's own buffer.
            tensor = self._read(value.handle, value.dtype) if hasattr(value, "handle") else value
            capsule = self._to_dlpack(tensor)
            pointer = _get_pointer(capsule, b"dltensor")
            address = ctypes.c_void_p.from_address(pointer).value
            size = int(value.shape.num_elements() or 0) * value.dtype.size
            device = device_name(value.device)
        except Exception:  # a string, a resource, a sparse or a deleted value
            return None
        if not address:
            return None
        return (device, address, size, tensor) if keep else (device, address, size)

    def _row(
        self,
        device: str,
        address: int,
        size: int,
        region: str,
        key: int | None = None,
        dtype: str | None = None,
    ) -> None:
        """A reading; `key` names the variable, so that its readings can be
        followed from one to the next (and its dtype, the arguments of a
        program it is one of matched by it)."""
        text = None if key is None else str(key)
        self._writer.record(
            TOLD, device=device, address=address, bytes=size, region=region, text=text, dtype=dtype
        )


class _Known:
    """A variable the adapter reads: its region, and what its readings found."""

    __slots__ = ("last", "moved", "reads", "ref", "region")

    def __init__(self, ref: Any, region: str) -> None:
        self.ref = ref
        self.region = region
        self.last: int | None = None  # its address at the last reading
        self.moved = False  # whether it had moved then
        self.reads = 0


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
