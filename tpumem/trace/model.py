"""A loaded trace: its metadata and its rows as Arrow columns."""

from __future__ import annotations

import mmap
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True, slots=True)
class Trace:
    """What one process recorded. `table` holds the rows (see trace/schema.py);
    `metadata` is the header with every later patch merged in; `complete` is
    False when the writer never closed the file (a crash or a kill)."""

    path: str | None
    metadata: dict[str, Any]
    table: pa.Table
    complete: bool = True
    # The file's memory map, when loaded from one. The table's columns are views
    # of it; after a column is copied out its pages are given back (they come
    # back from the page cache if read again), so an analysis holds one copy.
    mapping: mmap.mmap | None = None
    # Whole columns as numpy, read once: the analysis asks for them per device, and
    # a run on thousands of devices would otherwise read them thousands of times.
    _columns: dict[tuple, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    def _give_back_pages(self) -> None:
        if self.mapping is not None and hasattr(mmap, "MADV_DONTNEED"):
            self.mapping.madvise(mmap.MADV_DONTNEED)

    @property
    def framework(self) -> str:
        return str(self.metadata.get("framework", "unknown"))

    @property
    def warnings(self) -> list[str]:
        return list(self.metadata.get("warnings", []))

    def __len__(self) -> int:
        return self.table.num_rows

    def numbers(self, name: str, fill: float | int = 0) -> np.ndarray:
        """A numeric column as numpy, nulls replaced by `fill` (read-only)."""
        key = ("numbers", name, fill)
        if key not in self._columns:
            column = self.table.column(name)
            if column.null_count:
                column = pc.fill_null(column, fill)
            self._columns[key] = _read_only(column.to_numpy())
            self._give_back_pages()
        return self._columns[key]

    def valid(self, name: str) -> np.ndarray:
        """Where a column is not null (read-only)."""
        key = ("valid", name)
        if key not in self._columns:
            valid = self.table.column(name).is_valid().to_numpy(zero_copy_only=False)
            self._columns[key] = _read_only(valid)
        return self._columns[key]

    def is_kind(self, kind: str) -> np.ndarray:
        """Where the rows are of `kind` (read-only)."""
        key = ("kind", kind)
        if key not in self._columns:
            kinds = self.table.column("kind").cast(pa.string())
            found = pc.fill_null(pc.equal(kinds, kind), False).to_numpy(zero_copy_only=False)
            self._columns[key] = _read_only(found)
        return self._columns[key]

    def codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """A string column as (int32 codes, values); -1 where null. Read-only."""
        key = ("codes", name)
        if key not in self._columns:
            column = self.table.column(name).unify_dictionaries()
            if column.num_chunks == 0:
                codes, values = np.zeros(0, np.int32), []
            else:
                values = column.chunks[0].dictionary.to_pylist()
                indices = pa.chunked_array([chunk.indices for chunk in column.chunks])
                codes = pc.fill_null(indices, -1).to_numpy().astype(np.int32, copy=False)
            self._columns[key] = _read_only(codes)
            self._columns[("values", name)] = values  # type: ignore[assignment]
            self._give_back_pages()
        return self._columns[key], list(self._columns[("values", name)])

    def rows_by(self, name: str) -> dict[int, np.ndarray]:
        """The rows of each value of a string column: code -> row numbers, in order."""
        key = ("rows_by", name)
        if key not in self._columns:
            codes, _ = self.codes(name)
            order = np.argsort(codes, kind="stable")
            starts = np.flatnonzero(np.diff(codes[order], prepend=-2))
            groups = np.split(order, starts[1:])
            self._columns[key] = {int(codes[g[0]]): _read_only(g) for g in groups if len(g)}  # type: ignore[assignment]
        return self._columns[key]  # type: ignore[return-value]

    def to_pandas(self) -> Any:
        """All rows as a pandas DataFrame (needs pandas)."""
        return self.table.to_pandas()


def _read_only(values: np.ndarray) -> np.ndarray:
    """Shared by every caller: none may change it for the others."""
    values.flags.writeable = False
    return values
