"""The values a trace's rows may hold. Anything outside them no device or clock
gives (a corrupt file, a writer's bug): such a row is left out, or such a value
read as not recorded, and the trace's warnings say how many. The bounds keep the
analysis' sums and differences inside int64.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa

from tpumem.trace import arrow_arrays

# 1 PiB: more memory than any device or host has; a million of them still sum in int64.
MAX_BYTES = 1 << 50
# About 36 years either side of the trace's start.
MAX_TIME_NS = 1 << 60
BYTE_COLUMNS = (
    "bytes",
    "requested_bytes",
    "bytes_in_use",
    "bytes_reserved",
    "bytes_limit",
    "pool_bytes",
    "peak_bytes_in_use",
    "largest_free_block",
)
# Device addresses: positive, with room to add a size.
MAX_ADDRESS = 1 << 62
MAX_STACK_ID = 1 << 62


def _outside(column: pa.ChunkedArray, low: float, high: float) -> np.ndarray:
    """True where a value is outside [low, high] (NaN included); False where null."""
    values = arrow_arrays.filled(column, low)
    return ~((values >= low) & (values <= high))


def _nulled(table: pa.Table, name: str, bad: np.ndarray) -> pa.Table:
    column = table.column(name).combine_chunks()
    values = arrow_arrays.filled(column, 0)
    array = pa.array(values, type=column.type, mask=bad | ~arrow_arrays.valid(column))
    return table.set_column(table.schema.get_field_index(name), name, array)


def sane(table: pa.Table, release: Callable[[], None] = lambda: None) -> tuple[pa.Table, list[str]]:
    """The rows and values a trace may hold, and a warning for what was left out.
    `release` is called after each column is read (to give its pages back)."""
    notes = []
    drop = ~arrow_arrays.valid(table.column("kind"))
    drop |= _outside(table.column("time_ns"), -MAX_TIME_NS, MAX_TIME_NS)
    dropped = int(drop.sum())
    if dropped:
        table = table.take(np.flatnonzero(~drop))
        notes.append(
            f"left out {dropped:,} rows with no kind or a time more than 36 years "
            "from the trace's start"
        )
    nulled = np.zeros(table.num_rows, bool)
    bounds: dict[str, tuple[float, float]] = {name: (0, MAX_BYTES) for name in BYTE_COLUMNS}
    bounds |= {"address": (0, MAX_ADDRESS), "step": (-MAX_TIME_NS, MAX_TIME_NS)}
    bounds["stack"] = (0, MAX_STACK_ID)
    bounds["fragmentation"] = (0.0, 1.0)
    for name, (low, high) in bounds.items():
        column = table.column(name)
        if column.null_count == len(column):
            continue
        bad = _outside(column, low, high)
        if bad.any():
            nulled |= bad
            table = _nulled(table, name, bad)
        release()
    if nulled.any():
        notes.append(
            f"read {int(nulled.sum()):,} rows' sizes, addresses, steps, stacks or fragmentation "
            "as not recorded: their values were out of any device's range"
        )
    return table, notes
