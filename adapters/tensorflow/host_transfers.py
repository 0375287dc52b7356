"""Host data that TensorFlow copies into tensors, for the labels its allocator
events lack.

An allocation made outside any op (`tf.constant` of a NumPy array, the arrays
Keras' `fit()` is given, `convert_to_tensor`) reaches the profiler with no op,
dtype or shape: often the largest buffer of a run. Every copy of host data into
an eager tensor goes through `constant_op.convert_to_eager_tensor`, which the
adapter wraps to note each call's window, tensor and call stack; an unlabeled
allocation inside such a window, of exactly the tensor's size, gets them.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from tpumem.adapters.base import Patches
from tpumem.adapters.book_rows import INPUT, shape_text
from tpumem.adapters.call_stacks import CallStacks, Where
from tpumem.trace.arrow_arrays import equal_to, valid
from tpumem.trace.schema import ALLOC

OP = "convert_to_tensor"
SMALLEST_BYTES = 4096  # smaller copies are not worth a label's cost
_KEPT = 4096  # calls kept for labelling; old ones go first


@dataclass(frozen=True, slots=True)
class _Copy:
    start_ns: int
    end_ns: int
    nbytes: int
    dtype: str
    shape: str
    where: Where


class HostTransfers:
    def __init__(self, origin_ns: int, stacks: CallStacks) -> None:
        self.origin_ns = origin_ns
        self.labelled = 0
        self._stacks = stacks
        self._copies: collections.deque[_Copy] = collections.deque(maxlen=_KEPT)
        self._lock = threading.Lock()

    def install(self, patches: Patches) -> None:
        from tensorflow.python.framework import constant_op

        original, transfers = constant_op.convert_to_eager_tensor, self

        def convert_to_eager_tensor(value: Any, ctx: Any, dtype: Any = None) -> Any:
            start = time.time_ns()
            tensor = original(value, ctx, dtype)
            transfers._note(tensor, start, sys._getframe(1))
            return tensor

        convert_to_eager_tensor.__doc__ = original.__doc__
        patches.replace(constant_op, "convert_to_eager_tensor", convert_to_eager_tensor)

    def _note(self, tensor: Any, start: int, frame: Any) -> None:
        dtype = tensor.dtype
        elements = tensor.shape.num_elements()
        if elements is None or dtype.size * elements < SMALLEST_BYTES:
            return
        copy = _Copy(
            start - self.origin_ns,
            time.time_ns() - self.origin_ns,
            dtype.size * elements,
            dtype.name,
            shape_text(tensor.shape.as_list()),
            self._stacks(frame),
        )
        with self._lock:
            self._copies.append(copy)

    def label(self, columns: dict[str, Any]) -> dict[str, Any]:
        """A chunk's columns, with unlabeled allocations inside a copy labeled."""
        with self._lock:
            copies = list(self._copies)
        if not copies:
            return columns
        kind = columns["kind"]
        unlabeled = equal_to(kind, ALLOC) & ~valid(columns["op"])
        requested = np.ma.filled(columns["requested_bytes"], -1)
        times = np.asarray(columns["time_ns"])
        rows = np.flatnonzero(unlabeled)
        if not len(rows):
            return columns
        found: dict[int, _Copy] = {}
        for row in rows.tolist():
            for copy in copies:
                if copy.start_ns <= times[row] <= copy.end_ns and copy.nbytes == requested[row]:
                    found[row] = copy
                    break
        if not found:
            return columns
        self.labelled += len(found)
        labelled = dict(columns)
        for name, value in (
            ("op", lambda c: OP),
            ("region", lambda c: INPUT),
            ("dtype", lambda c: c.dtype),
            ("shape", lambda c: c.shape),
            ("source", lambda c: c.where[0]),
            ("stack", lambda c: c.where[1]),
        ):
            current = columns.get(name)
            values = current.to_pylist() if current is not None else [None] * len(times)
            for row, copy in found.items():
                values[row] = value(copy)
            labelled[name] = pa.array(values, pa.int64() if name == "stack" else pa.string())
        return labelled
