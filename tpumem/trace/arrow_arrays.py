"""Arrow columns read as numpy arrays straight from their buffers.

Reading a trace needs a column's values, where it is null, some of its rows and a
dictionary column's codes. Arrow's own functions for these (fill_null, take,
is_valid, cast) live in pyarrow.compute, which takes about 35 ms to import: more
than a `tpumem report` of a 100,000-event profile spends reading its trace. The
trace's numeric, dictionary and string columns are plain buffers (a validity
bitmap, offsets, the values), so numpy reads them in place.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa

Column: TypeAlias = pa.Array | pa.ChunkedArray


def _chunks(column: Column) -> list[pa.Array]:
    return column.chunks if isinstance(column, pa.ChunkedArray) else [column]


def _dtype(column: Column) -> np.dtype:
    """The numpy type of a numeric column's values (a dictionary column's codes)."""
    kind = column.type.index_type if pa.types.is_dictionary(column.type) else column.type
    dtype: np.dtype[Any] = np.dtype(kind.to_pandas_dtype())
    return dtype


def _valid(chunk: pa.Array) -> np.ndarray | None:
    """Where a chunk is not null (its validity bitmap, unpacked); None: nowhere null."""
    if chunk.null_count == 0:
        return None
    if chunk.null_count == len(chunk):
        return np.zeros(len(chunk), dtype=bool)
    bitmap = np.frombuffer(chunk.buffers()[0], dtype=np.uint8)
    bits = np.unpackbits(bitmap, bitorder="little", count=chunk.offset + len(chunk))
    return bits[chunk.offset :].view(bool)


def _values(chunk: pa.Array) -> np.ndarray:
    """A numeric chunk's values, nulls' slots as they lie (a view, read only)."""
    if isinstance(chunk, pa.DictionaryArray):
        chunk = chunk.indices
    kind = chunk.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        raise TypeError(f"not a numeric or dictionary column: {kind}")
    dtype = np.dtype(kind.to_pandas_dtype())
    data = chunk.buffers()[1]
    if data is None:  # (a chunk of nulls only may have no values buffer)
        return np.zeros(len(chunk), dtype=dtype)
    return np.frombuffer(data, dtype=dtype, count=chunk.offset + len(chunk))[chunk.offset :]


def valid(column: Column) -> np.ndarray:
    """Where the column is not null, for a column of any type."""
    parts = []
    for chunk in _chunks(column):
        where = _valid(chunk)
        parts.append(np.ones(len(chunk), bool) if where is None else where)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def filled(column: Column, fill: float | int) -> np.ndarray:
    """A numeric column's values (a dictionary column's codes), nulls read as `fill`."""
    parts = []
    for chunk in _chunks(column):
        values, where = _values(chunk), _valid(chunk)
        parts.append(values if where is None else np.where(where, values, values.dtype.type(fill)))
    if not parts:
        return np.zeros(0, dtype=_dtype(column))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _by_chunk(
    column: Column, rows: np.ndarray
) -> Iterator[tuple[pa.Array, np.ndarray, np.ndarray]]:
    """For each chunk holding some of `rows`: the chunk, where those rows are in
    `rows`, and their rows in the chunk."""
    chunks, rows = _chunks(column), np.asarray(rows, dtype=np.int64)
    if len(chunks) == 1:
        yield chunks[0], np.arange(len(rows)), rows
        return
    ends = np.cumsum([len(chunk) for chunk in chunks])
    owner = np.searchsorted(ends, rows, side="right")
    for index in np.unique(owner).tolist():
        mine = np.flatnonzero(owner == index)
        yield chunks[index], mine, rows[mine] - (ends[index] - len(chunks[index]))


def filled_at(column: Column, rows: np.ndarray, fill: float | int) -> np.ndarray:
    """`filled(column, fill)[rows]`, reading only those rows of each chunk."""
    out = np.empty(len(rows), dtype=_dtype(column))
    for chunk, mine, local in _by_chunk(column, rows):
        values, where = _values(chunk)[local], _valid(chunk)
        out[mine] = (
            values if where is None else np.where(where[local], values, values.dtype.type(fill))
        )
    return out


def texts_at(column: Column, rows: np.ndarray) -> list[str | None]:
    """The given rows of a string column, None where null."""
    found: list[str | None] = [None] * len(rows)
    for chunk, mine, local in _by_chunk(column, rows):
        wide = pa.types.is_large_string(chunk.type)
        if not (wide or pa.types.is_string(chunk.type)):
            raise TypeError(f"not a string column: {chunk.type}")
        _, offsets_buffer, data = chunk.buffers()
        offsets = np.frombuffer(
            offsets_buffer, np.int64 if wide else np.int32, count=chunk.offset + len(chunk) + 1
        )[chunk.offset :]
        text = memoryview(data if data is not None else b"")
        where = _valid(chunk)
        for at, row in zip(mine.tolist(), local.tolist(), strict=True):
            if where is None or where[row]:
                found[at] = str(text[offsets[row] : offsets[row + 1]], "utf-8")
    return found


def dictionary_codes(
    column: Column, rows: np.ndarray | None = None
) -> tuple[np.ndarray, list[Any]]:
    """A dictionary column (or those rows of it) as (int32 codes, -1 where null;
    its values)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.unify_dictionaries()
    chunks = _chunks(column)
    if not chunks:
        return np.zeros(0 if rows is None else len(rows), np.int32), []
    values = chunks[0].dictionary.to_pylist()
    codes = filled(column, -1) if rows is None else filled_at(column, rows, -1)
    return codes.astype(np.int32, copy=False), values


def codes_of(values: list[Any], value: object) -> list[int]:
    """The codes a dictionary gives `value` (Arrow does not require them unique)."""
    return [code for code, v in enumerate(values) if v == value]


def equal_to(column: Column, value: object) -> np.ndarray:
    """Where a dictionary column holds `value` (False where null)."""
    codes, values = dictionary_codes(column)
    return np.isin(codes, codes_of(values, value))
