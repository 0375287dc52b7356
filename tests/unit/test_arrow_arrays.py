"""trace/arrow_arrays.py reads columns from their Arrow buffers: the same values
as Arrow's own compute functions give, for chunks with nulls, offsets (slices)
and several chunks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from tpumem.trace import arrow_arrays


def _column(kind: pa.DataType, seed: int) -> pa.ChunkedArray:
    """Chunks of random values, about a third null, each a slice of a larger array
    (so its buffers start at an offset), one of them empty."""
    rng = np.random.default_rng(seed)
    chunks = []
    for size in (0, 1, 9, 70, 1000):
        values = rng.integers(-50, 50, size + 5)
        array = pa.array(values.tolist(), kind, mask=rng.random(size + 5) < 0.33)
        chunks.append(array.slice(3, size))
    return pa.chunked_array(chunks, kind)


@pytest.mark.parametrize("kind", [pa.int64(), pa.int8(), pa.float64(), pa.int32()])
def test_numeric_columns_read_as_arrow_computes_them(kind):
    for seed in range(3):
        column = _column(kind, seed)
        want = pc.fill_null(column, 7).to_numpy()
        assert arrow_arrays.filled(column, 7).tolist() == want.tolist()
        assert arrow_arrays.valid(column).tolist() == pc.is_valid(column).to_pylist()
        rows = np.random.default_rng(seed).integers(0, len(column), 40)
        assert arrow_arrays.filled_at(column, rows, 7).tolist() == want[rows].tolist()


def test_dictionary_and_string_columns_read_as_arrow_computes_them():
    words = pa.chunked_array(
        [
            pa.array(["a", None, "bb", "a", "", "ccc"]).slice(1),
            pa.array([None, None], pa.string()),
            pa.array(["bb", "é", None, "a"], pa.large_string()).slice(2).cast(pa.string()),
        ]
    )
    encoded = pa.chunked_array([chunk.dictionary_encode() for chunk in words.chunks])
    codes, values = arrow_arrays.dictionary_codes(encoded)
    assert [None if c < 0 else values[c] for c in codes] == words.to_pylist()
    rows = np.array([7, 0, 3, 2, 7, 5])
    codes_at, values_at = arrow_arrays.dictionary_codes(encoded, rows)
    assert [None if c < 0 else values_at[c] for c in codes_at] == [
        words.to_pylist()[r] for r in rows
    ]
    assert arrow_arrays.texts_at(words, rows) == [words.to_pylist()[r] for r in rows]
    assert arrow_arrays.codes_of(values, "a") == [values.index("a")]


def test_columns_without_chunks_or_values():
    empty = pa.chunked_array([], pa.int64())
    assert arrow_arrays.filled(empty, 0).tolist() == []
    assert arrow_arrays.valid(empty).tolist() == []
    assert (
        arrow_arrays.dictionary_codes(pa.chunked_array([], pa.dictionary(pa.int8(), pa.string())))[
            0
        ].tolist()
        == []
    )
    nulls = pa.nulls(3, pa.int64())
    assert arrow_arrays.filled(nulls, -1).tolist() == [-1, -1, -1]
    with pytest.raises(TypeError):
        arrow_arrays.filled(pa.array(["x"]), 0)
