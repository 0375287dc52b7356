"""Columns and metadata of a tpumem trace file (format version 1).

One Arrow IPC stream, one wide schema: every row is an event of some `kind`. The
bulk rows are allocations and frees; samples, marks, compiled programs (their
memory analysis and their HLO) and metadata patches are rare. Strings are
dictionary-encoded so a million events naming the same op cost a million small
integers.
"""

from __future__ import annotations

import pyarrow as pa

FORMAT_NAME = "tpumem-trace"
FORMAT_VERSION = 1
METADATA_KEY = b"tpumem"
# Arrow's end-of-stream marker (a continuation token and a zero length): a file that
# ends with it was closed by its writer.
END_OF_STREAM = b"\xff\xff\xff\xff\x00\x00\x00\x00"

# Row kinds.
ALLOC = "alloc"
FREE = "free"
SAMPLE = "sample"  # a reading of the allocator's counters
MARK = "mark"  # a step or phase boundary: `text` names it, `step` numbers it
PROGRAM = "program"  # a compiled program's memory analysis, JSON in `text`
HLO = "hlo"  # a compiled program as XLA dumped it (HloProto), JSON in `text` (hlo_rows.py)
META = "meta"  # a metadata patch (exit status, warnings), JSON in `text`
TPU = "tpu"  # a program compiled ahead of time for a TPU by --tpu, JSON in `text` (tpu_rows.py)
STACK = "stack"  # a Python call stack, `stack` its id, its frames JSON in `text` (stack_rows.py)
# The stacks that built a compiled function's ops, by op name: `op` names the
# function, `text` is JSON {"function": name, "stacks": {op: stack id}} (stack_rows.py).
OP_STACKS = "op stacks"
# What a buffer made earlier is for, learned after it was made (a jitted step's
# arguments, told by the framework's objects that hold them): `device` and
# `buffer_id` name the buffer, `region` its use.
TOLD = "told"
KINDS = (ALLOC, FREE, SAMPLE, MARK, PROGRAM, HLO, META, TPU, STACK, OP_STACKS, TOLD)

# The mark (its `text`) of a training batch Keras' fit() started: its JAX trainer
# runs `train_step(state, data)`, its state the tuple of trainable, non-trainable,
# optimizer and metrics variables (keras/src/backend/jax/trainer.py).
KERAS_STEP = "keras train batch"
# Marks (their `text`, no step number) where Keras starts a batch of evaluate() or
# predict(): the phases that are not training.
KERAS_EVALUATE = "keras evaluate batch"
KERAS_PREDICT = "keras predict batch"
PHASES = {KERAS_STEP: None, KERAS_EVALUATE: "evaluate()", KERAS_PREDICT: "predict()"}
# The region of an imported profile's allocations made before its first entry
# (live then, freed or still held later): no category can be known of them.
BEFORE_TRACE = "before the trace"
# Marks (their `text`) around a stretch where a chunked capture recorded nothing.
CAPTURE_GAP = "capture gap"
CAPTURE_RESUMED = "capture resumed"

_DICT = pa.dictionary(pa.int32(), pa.string())

# (name, type, meaning). The order is the file's column order.
COLUMNS: tuple[tuple[str, pa.DataType, str], ...] = (
    ("kind", pa.dictionary(pa.int8(), pa.string()), "one of KINDS"),
    ("time_ns", pa.int64(), "nanoseconds since the trace's start_time_ns"),
    ("device", _DICT, "device or memory space, e.g. CPU:0, GPU:1, TPU:3"),
    ("allocator", _DICT, "allocator name, e.g. GPU_0_bfc"),
    ("buffer_id", pa.int64(), "pairs an alloc with its free; unique per allocation"),
    ("address", pa.int64(), "device address of the buffer, when known"),
    ("bytes", pa.int64(), "bytes the allocator handed out (alloc/free)"),
    ("requested_bytes", pa.int64(), "bytes the program asked for, when known"),
    ("op", _DICT, "op or program that made the buffer"),
    ("region", _DICT, "parameter, activation, output, temp, ..."),
    ("dtype", _DICT, "element type, e.g. float32"),
    ("shape", _DICT, "shape, e.g. [1000,1000]"),
    ("source", _DICT, "Python file:line that created the buffer"),
    ("stack", pa.int64(), "the call stack that created the buffer: a stack row's id"),
    ("step", pa.int64(), "training step (marks)"),
    ("bytes_in_use", pa.int64(), "allocator-reported bytes in use after the event"),
    ("bytes_reserved", pa.int64(), "allocator-reported reserved bytes"),
    ("bytes_limit", pa.int64(), "allocator's memory limit"),
    ("pool_bytes", pa.int64(), "bytes the allocator holds from the device (its pool)"),
    ("peak_bytes_in_use", pa.int64(), "allocator-reported running peak"),
    ("largest_free_block", pa.int64(), "allocator-reported largest free block"),
    ("fragmentation", pa.float64(), "allocator-reported external fragmentation"),
    ("text", pa.string(), "mark name, or JSON for program/meta rows"),
)

SCHEMA = pa.schema([pa.field(name, dtype) for name, dtype, _ in COLUMNS])

# The fidelity a device's events have (docs/figures.md).
ALLOCATOR = "allocator"  # real allocator events with addresses
BUFFER = "buffer"  # framework buffer lifetimes, exact sizes, no allocator view
COUNTER = "counter"  # sampled totals only
