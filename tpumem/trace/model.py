"""A loaded trace: its metadata and its rows as Arrow columns."""

from __future__ import annotations

import mmap
from dataclasses import dataclass
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
        """A numeric column as numpy, nulls replaced by `fill`."""
        column = self.table.column(name)
        if column.null_count:
            column = pc.fill_null(column, fill)
        values = column.to_numpy()
        self._give_back_pages()
        return values

    def valid(self, name: str) -> np.ndarray:
        """Where a column is not null."""
        return self.table.column(name).is_valid().to_numpy(zero_copy_only=False)

    def codes(self, name: str) -> tuple[np.ndarray, list[str]]:
        """A string column as (int32 codes, values); -1 where null."""
        column = self.table.column(name).unify_dictionaries()
        if column.num_chunks == 0:
            return np.zeros(0, np.int32), []
        values = column.chunks[0].dictionary.to_pylist()
        indices = pa.chunked_array([chunk.indices for chunk in column.chunks])
        codes = pc.fill_null(indices, -1).to_numpy().astype(np.int32, copy=False)
        self._give_back_pages()
        return codes, values

    def to_pandas(self) -> Any:
        """All rows as a pandas DataFrame (needs pandas)."""
        return self.table.to_pandas()
