"""A loaded trace: its metadata and its rows as Arrow columns."""

from __future__ import annotations

import mmap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa

from tpumem.errors import TpumemError
from tpumem.trace import arrow_arrays
from tpumem.trace.metadata import TraceMetadata

# Up to this many values (devices), rows are found by scanning a column.
FEW_VALUES = 16
KEPT_CODES = "device"
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Trace:
    """What one process recorded. `table` holds the rows (see trace/schema.py);
    `metadata` is the header with every later patch merged in; `complete` is
    False when the writer never closed the file (a crash or a kill); `damaged`
    True when a record batch could not be read (the rows after it are not in
    `table`)."""

    path: str | None
    metadata: TraceMetadata
    table: pa.Table
    complete: bool = True
    damaged: bool = False
    running: bool = False  # its writer still holds it (trace/live.py): the run goes on
    # The file's memory map, when loaded from one. The table's columns are views
    # of it; after a column is copied out its pages are given back (they come
    # back from the page cache if read again), so an analysis holds one copy.
    mapping: mmap.mmap | None = None
    # Masks, codes and row groups, read once: the analysis asks for them per device,
    # and a run on thousands of devices would otherwise read them thousands of times.
    _columns: dict[tuple[str, ...], Any] = field(default_factory=dict, repr=False, compare=False)

    def _give_back_pages(self) -> None:
        if self.mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
            self.mapping.madvise(mmap.MADV_DONTNEED)

    @property
    def framework(self) -> str:
        return self.metadata.framework

    @property
    def warnings(self) -> list[str]:
        return list(self.metadata.warnings)

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def numbers(self, name: str, fill: float | int = 0) -> np.ndarray:
        """A numeric column as numpy, nulls replaced by `fill`."""
        values = arrow_arrays.filled(self.table.column(name), fill)
        self._give_back_pages()
        return values

    def numbers_at(self, name: str, rows: np.ndarray, fill: float | int = 0) -> np.ndarray:
        """`numbers(name, fill)[rows]`, reading only those rows (a device of many)."""
        return arrow_arrays.filled_at(self.table.column(name), rows, fill)

    def texts_at(self, rows: np.ndarray) -> list[Any]:
        """The `text` of the given rows (mark names, JSON records), as Python values."""
        if not len(rows):
            return []
        return arrow_arrays.texts_at(self.table.column("text"), rows)

    def valid(self, name: str) -> np.ndarray:
        """Where a column is not null (read-only)."""
        return self._kept(
            ("valid", name),
            lambda: arrow_arrays.valid(self.table.column(name)),
        )

    def is_kind(self, kind: str) -> np.ndarray:
        """Where the rows are of `kind` (read-only)."""

        return self._kept(
            ("kind", kind), lambda: arrow_arrays.equal_to(self.table.column("kind"), kind)
        )

    def _kept(self, key: tuple[str, ...], read: Callable[[], np.ndarray]) -> np.ndarray:
        """`read()`, kept for the next call when the trace has many devices (each
        asks); with few, not kept (a large trace's masks would add up)."""
        if key in self._columns:
            kept: np.ndarray = self._columns[key]
            return kept
        values = _read_only(read())
        if self._many_devices():
            self._columns[key] = values
        return values

    def _many_devices(self) -> bool:
        return self.derived("many devices", lambda: len(self.codes(KEPT_CODES)[1]) > FEW_VALUES)

    def codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """A string column as (int32 codes, values); -1 where null. The device
        column's are kept (every device's analysis reads them), and the others'
        with many devices (each device's asks); with few, not. The values are
        shared: read only."""
        key = ("codes", name)
        if key in self._columns:
            both: tuple[np.ndarray, list[str]] = self._columns[key]
            return both
        codes, values = arrow_arrays.dictionary_codes(self.table.column(name))
        self._give_back_pages()
        if name == KEPT_CODES or self._many_devices():
            self._columns[key] = (_read_only(codes), values)
        return codes, values

    def codes_at(self, name: str, rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """`codes(name)` of those rows only: (their codes, values). Every call
        reads the column's whole dictionary: with many devices (a dictionary of
        a name per device, each device asking) the column is read once instead."""
        if len(rows) * 8 > self.table.num_rows or self._many_devices():
            codes, values = self.codes(name)
            return codes[rows], values
        return arrow_arrays.dictionary_codes(self.table.column(name), rows)

    def derived(self, name: str, compute: Callable[[], T]) -> T:
        """`compute()`, once per trace: a figure every device's analysis reads."""
        key = ("derived", name)
        if key not in self._columns:
            self._columns[key] = compute()
        value: T = self._columns[key]
        return value

    def rows_of(self, name: str, code: int) -> np.ndarray:
        """The rows where a string column has the value of `code`, in order. With
        few values, a scan; with many (thousands of devices), their groups are
        made once and looked up."""
        codes, values = self.codes(name)
        if len(values) <= FEW_VALUES:
            return np.flatnonzero(codes == code)
        key = ("groups", name)
        if key not in self._columns:
            order = np.argsort(codes, kind="stable")
            starts = np.flatnonzero(np.diff(codes[order], prepend=-2))
            self._columns[key] = {
                int(codes[group[0]]): _read_only(group)
                for group in np.split(order, starts[1:])
                if len(group)
            }
        groups: dict[int, np.ndarray] = self._columns[key]
        return groups.get(code, np.zeros(0, np.int64))

    def to_pandas(self) -> Any:
        """All rows as a pandas DataFrame (needs pandas)."""
        try:
            import pandas  # noqa: F401 - Arrow's to_pandas needs it
        except ImportError:
            raise TpumemError(
                "Trace.to_pandas needs pandas, which is not installed: pip install pandas"
            ) from None
        return self.table.to_pandas()


def _read_only(values: np.ndarray) -> np.ndarray:
    """Shared by every caller: none may change it for the others."""
    values.flags.writeable = False
    return values
