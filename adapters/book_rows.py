"""What the buffer books of the JAX and PyTorch/XLA adapters share: the labels
they give their buffers, so that the two frameworks' breakdowns speak the same
words, and the rows they write (packed: BookRows)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from tpumem.trace.schema import ALLOC, FREE, TOLD
from tpumem.trace.writer import FLUSH_INTERVAL_S

# A book's rows go to the trace as often as the writer flushes its own (what a
# SIGKILL can lose): a batch costs about a millisecond of the GIL whatever its
# size, which at every 10 ms tick of the sampler was a tenth of a step.
WRITE_EVERY_S = FLUSH_INTERVAL_S

# Regions: what a buffer is for.
OUTPUT = "output"  # a program's result
INPUT = "input"  # host data put on a device
TEMP = "temp"  # a compiled program's working memory while it runs
FOUND = "array"  # found by a poll, made where no hook runs
PARAMETER = "parameter"  # a model's parameter (torch.nn.Parameter)
GRADIENT = "gradient"  # a parameter's .grad
OPTIMIZER = "optimizer state"  # what an optimizer keeps in its state (torch.optim's .state)
STATE = "state"  # other state a framework carries between steps (statistics, RNG, metrics)


def shape_text(shape: Iterable[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


# A row: a tuple of ints in this order. Kinds, devices and labels are codes
# (BookRows' tables); NONE stands for a missing address, requested size or label
# (a free row has no label).
KIND, TIME, DEVICE, BUFFER, ADDRESS, BYTES, REQUESTED, LABEL = range(8)
ALLOC_CODE, FREE_CODE, TOLD_CODE = 0, 1, 2
NONE = -1
_KINDS = pa.array([ALLOC, FREE, TOLD], pa.string())
# A label: what an allocation row says of its buffer, in this order, then `where`
# (call_stacks.Where: the source line and the stack id).
LABEL_FIELDS = ("op", "region", "dtype", "shape")


class BookRows:
    """A buffer book's rows, made as tuples of ints, so that turning a batch into
    trace columns is numpy's work and not Python's a field: as tuples of labels,
    the columns cost 1.7 us of the GIL a row on the sampler's thread, two rows a
    JAX eager call whose own call takes 7 us. Devices and labels are interned as
    codes. (Not an `array.array`: its extend parses every int, 3,500 instructions
    a row against 300 for a tuple appended to a list.)

    Not locked: the book that holds it makes and takes rows under its own lock.
    Hot paths append their rows to `made` themselves (with `labels` and `label`)."""

    def __init__(self) -> None:
        self.made: list[tuple[int, ...]] = []
        self.labels: dict[tuple[Any, ...], int] = {}  # (op, region, dtype, shape, where) -> code
        self._devices: dict[str, int] = {}
        self._device_names: list[str] = []
        # Per label field and the source: value -> code, and the values by code.
        self._codes: list[dict[str, int]] = [{} for _ in range(len(LABEL_FIELDS) + 1)]
        self._names: list[list[str]] = [[] for _ in range(len(LABEL_FIELDS) + 1)]
        # A label's codes, one row each: its fields', its source's, its stack id.
        self._label_rows: list[tuple[int, ...]] = []
        self._label_table = np.empty((0, len(LABEL_FIELDS) + 2), np.int64)

    def device(self, name: str) -> int:
        code = self._devices.get(name)
        if code is None:
            code = self._devices[name] = len(self._device_names)
            self._device_names.append(name)
        return code

    def label(self, key: tuple[Any, ...]) -> int:
        """The code of a label (op, region, dtype, shape, where), made the first time."""
        code = self.labels.get(key)
        if code is not None:
            return code
        *fields, (source, stack) = key
        codes = [self._value_code(i, value) for i, value in enumerate((*fields, source))]
        self._label_rows.append((*codes, NONE if stack is None else stack))
        code = self.labels[key] = len(self._label_rows) - 1
        return code

    def _value_code(self, field: int, value: str | None) -> int:
        if value is None:
            return NONE
        codes = self._codes[field]
        code = codes.get(value)
        if code is None:
            code = codes[value] = len(self._names[field])
            self._names[field].append(value)
        return code

    def alloc(
        self,
        time_ns: int,
        device: str,
        buffer_id: int,
        address: int | None,
        size: int,
        requested: int | None,
        label: tuple[Any, ...],
    ) -> None:
        address = NONE if address is None else address
        requested = NONE if requested is None else requested
        row = (ALLOC_CODE, time_ns, self.device(device), buffer_id, address, size, requested)
        self.made.append((*row, self.label(label)))

    def free(
        self, time_ns: int, device: str, buffer_id: int, address: int | None, size: int
    ) -> None:
        address = NONE if address is None else address
        self.made.append(
            (FREE_CODE, time_ns, self.device(device), buffer_id, address, size, NONE, NONE)
        )

    def take(self) -> list[tuple[int, ...]]:
        """The rows made since the last call (under the book's lock; `columns`
        makes them trace columns outside it)."""
        made, self.made = self.made, []
        return made

    def columns(self, made: list[tuple[int, ...]]) -> tuple[dict[str, Any], int]:
        """Rows that `take` gave as trace columns, for TraceWriter.write_columns,
        and their number. Outside the book's lock: the tables it reads only grow,
        and a row names only what was there when it was made."""
        if not made:
            return {}, 0
        rows = np.array(made, dtype=np.int64)
        if len(self._label_table) < len(self._label_rows):
            self._label_table = np.array(self._label_rows, dtype=np.int64)
        columns: dict[str, Any] = {
            "kind": pa.DictionaryArray.from_arrays(pa.array(rows[:, KIND].astype(np.int8)), _KINDS),
            "time_ns": rows[:, TIME],
            "device": _dictionary(rows[:, DEVICE], None, self._device_names),
            "buffer_id": rows[:, BUFFER],
            "address": _masked(rows[:, ADDRESS]),
            "bytes": rows[:, BYTES],
            "requested_bytes": _masked(rows[:, REQUESTED]),
        }
        # Each row's label codes (all NONE for a row without a label).
        table = np.full((len(rows), self._label_table.shape[1]), NONE, np.int64)
        labelled = rows[:, LABEL] != NONE
        table[labelled] = self._label_table[rows[labelled, LABEL]]
        for i, field in enumerate((*LABEL_FIELDS, "source")):
            columns[field] = _dictionary(table[:, i], table[:, i] != NONE, self._names[i])
        columns["stack"] = _masked(table[:, -1])
        return columns, len(made)


def _masked(values: np.ndarray) -> np.ma.MaskedArray:
    return np.ma.masked_array(values, values == NONE)


def _dictionary(codes: np.ndarray, valid: np.ndarray | None, names: list[str]) -> pa.Array:
    """A dictionary column of the values `codes` name in `names` (null where not
    `valid`), its dictionary only the values this batch uses."""
    used = np.unique(codes if valid is None else codes[valid])
    indices = np.searchsorted(used, codes).astype(np.int32)
    mask = None if valid is None else ~valid
    if mask is not None:
        indices[mask] = 0
    dictionary = pa.array([names[code] for code in used.tolist()], pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(indices, mask=mask), dictionary)
