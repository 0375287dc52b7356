"""The buffers of a script's input pipeline: what tf.data's iterator kernels
allocate (a shuffle buffer's elements, a prefetched batch, the batch a step
takes) are its inputs.

TensorFlow's allocator events name the kernel that was running: tf.data fills
its buffers inside `MakeIterator` (the first elements of a shuffle buffer) and
`IteratorGetNext` (each element after). These are TensorFlow's own kernels, the
op types its registry gives the iterator, not names a script chooses; inside a
tf.function the kernel's node is `<scope>/IteratorGetNext`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from tpumem.adapters.book_rows import INPUT
from tpumem.trace.arrow_arrays import dictionary_codes, equal_to
from tpumem.trace.schema import ALLOC

ITERATOR_KERNELS = frozenset(
    {
        "MakeIterator",
        "IteratorGetNext",
        "IteratorGetNextSync",
        "IteratorGetNextAsOptional",
        "MultiDeviceIteratorGetNextFromShard",
    }
)


def label_pipeline(columns: dict[str, Any]) -> dict[str, Any]:
    """A chunk's columns, with the allocations of tf.data's iterator kernels in
    the input region (as they were, should labelling them fail: a label is
    never worth a chunk)."""
    try:
        return _labelled(columns)
    except Exception:
        return columns


def _labelled(columns: dict[str, Any]) -> dict[str, Any]:
    ops = columns.get("op")
    if ops is None:
        return columns
    # By the chunk's distinct op names, not its rows.
    if not pa.types.is_dictionary(ops.type):
        ops = ops.dictionary_encode()
    codes, names = dictionary_codes(ops)
    kernels = [isinstance(n, str) and n.rsplit("/", 1)[-1] in ITERATOR_KERNELS for n in names]
    if not any(kernels):
        return columns
    found = equal_to(columns["kind"], ALLOC) & np.array([*kernels, False], bool)[codes]
    if not found.any():
        return columns
    current = columns.get("region")
    regions = current.to_pylist() if current is not None else [None] * len(codes)
    for row in np.flatnonzero(found).tolist():
        regions[row] = INPUT
    return {**columns, "region": pa.array(regions, pa.string())}
