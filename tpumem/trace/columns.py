"""Turning Python values or numpy arrays into a record batch of the trace schema."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from tpumem.trace.schema import SCHEMA

# Up to this many Python strings are encoded as they are converted, in one call;
# more are converted first and then encoded, which is faster for long lists.
_ENCODED_AT_ONCE = 64


def _dictionary(values: Any, dtype: pa.DictionaryType) -> pa.Array:
    if isinstance(values, pa.DictionaryArray):
        array = values
    elif isinstance(values, list) and len(values) <= _ENCODED_AT_ONCE:
        # (The writer's batch of the last 0.1 s: a few rows, ten times a second,
        # on cores the training loop keeps busy.)
        return pa.array(values, type=dtype)
    else:
        if not isinstance(values, pa.Array):
            values = pa.array(values, type=pa.string())
        array = values.dictionary_encode()
    if array.type != dtype:
        array = pa.DictionaryArray.from_arrays(
            array.indices.cast(dtype.index_type), array.dictionary.cast(dtype.value_type)
        )
    return array


def _plain(values: Any, dtype: pa.DataType) -> pa.Array:
    if isinstance(values, pa.Array):
        return values if values.type == dtype else values.cast(dtype)
    if isinstance(values, np.ma.MaskedArray):
        return pa.array(values.data, type=dtype, mask=np.ma.getmaskarray(values))
    return pa.array(values, type=dtype)


def record_batch(columns: Mapping[str, Any], num_rows: int) -> pa.RecordBatch:
    """A batch holding `columns` (lists, numpy arrays, masked arrays or Arrow
    arrays); schema columns not given are null."""
    unknown = set(columns) - set(SCHEMA.names)
    if unknown:
        raise ValueError(f"not trace columns: {sorted(unknown)}")
    arrays = []
    for field in SCHEMA:
        values = columns.get(field.name)
        if values is None:
            arrays.append(pa.nulls(num_rows, field.type))
        elif pa.types.is_dictionary(field.type):
            arrays.append(_dictionary(values, field.type))
        else:
            arrays.append(_plain(values, field.type))
        if len(arrays[-1]) != num_rows:
            raise ValueError(f"column {field.name} has {len(arrays[-1])} rows, not {num_rows}")
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def rows_to_batch(rows: Sequence[Mapping[str, Any]]) -> pa.RecordBatch:
    """A batch from row dicts, as an adapter records them one event at a time."""
    names = {name for row in rows for name in row}
    columns = {name: [row.get(name) for row in rows] for name in names}
    return record_batch(columns, len(rows))
