"""What the buffer books of the JAX and PyTorch/XLA adapters share: the labels
they give their buffers, so that the two frameworks' breakdowns speak the same
words, and the rows they write."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tpumem.trace.writer import FLUSH_INTERVAL_S

# A book's rows go to the trace as often as the writer flushes its own (what a
# SIGKILL can lose): a batch costs about a millisecond of the GIL whatever its
# size, which at every 10 ms tick of the sampler was a tenth of a step.
WRITE_EVERY_S = FLUSH_INTERVAL_S

# A book's row: these trace columns, in this order. A free row carries only the
# first six; NO_LABELS fills the rest. The last two are where the buffer was made
# (call_stacks.Where).
ROW_FIELDS = (
    "kind",
    "time_ns",
    "device",
    "buffer_id",
    "address",
    "bytes",
    "requested_bytes",
    "op",
    "region",
    "dtype",
    "shape",
    "source",
    "stack",
)
NO_LABELS = (None,) * 7

# Regions: what a buffer is for.
OUTPUT = "output"  # a program's result
INPUT = "input"  # host data put on a device
TEMP = "temp"  # a compiled program's working memory while it runs
FOUND = "array"  # found by a poll, made where no hook runs
PARAMETER = "parameter"  # a model's parameter (torch.nn.Parameter)
GRADIENT = "gradient"  # a parameter's .grad


def shape_text(shape: Iterable[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def rows_to_columns(rows: list[tuple[Any, ...]]) -> tuple[dict[str, list[Any]], int]:
    """A book's rows as trace columns, for TraceWriter.write_columns."""
    if not rows:
        return {}, 0
    columns = zip(ROW_FIELDS, zip(*rows, strict=True), strict=True)
    return {name: list(values) for name, values in columns}, len(rows)
