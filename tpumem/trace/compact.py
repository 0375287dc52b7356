"""Rewrites a finished trace made of many small record batches as few large ones.

The writer flushes ten batches a second, so that a killed run loses at most a
tenth of a second; a run of hours leaves tens of thousands of them, and reading
a batch costs more than reading its rows (each carries its dictionaries). Once
the run is over, `tpumem profile` joins them: the same rows in the same order,
the same header, written beside the trace and renamed onto it, so the trace is
whole at every moment. A trace that is damaged, not closed, or already compact
is left as it is.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import tempfile
from pathlib import Path

import pyarrow as pa

from tpumem.trace.schema import END_OF_STREAM

# Fewer batches than this are read quickly enough as they are.
COMPACT_BATCHES = 256
JOINED_ROWS = 1 << 16


def compact(path: Path) -> bool:
    """Joins the trace's batches; True when it rewrote the file."""
    path = Path(os.path.realpath(path))  # (-o a link: the file it names, the link kept)
    with open(path, "rb") as handle:
        identity = os.fstat(handle.fileno())
        if identity.st_size < len(END_OF_STREAM):
            return False
        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    if data[-len(END_OF_STREAM) :] != END_OF_STREAM:
        return False  # not closed: leave it for the reader to make what it can of it
    try:
        reader = pa.ipc.open_stream(pa.BufferReader(pa.py_buffer(data)))
    except (pa.ArrowException, OSError, ValueError):
        return False
    batches = []
    try:
        for batch in reader:
            batch.validate(full=True)
            batches.append(batch)
    except (pa.ArrowException, OSError, ValueError):
        return False
    if len(batches) < COMPACT_BATCHES:
        return False
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as sink, pa.ipc.new_stream(sink, reader.schema) as writer:
            group: list[pa.RecordBatch] = []
            rows = 0
            for batch in [*batches, None]:
                if batch is not None:
                    group.append(batch)
                    rows += batch.num_rows
                if group and (batch is None or rows >= JOINED_ROWS):
                    joined = pa.Table.from_batches(group, reader.schema).combine_chunks()
                    for part in joined.to_batches():
                        writer.write_batch(part)
                    group, rows = [], 0
        os.chmod(temporary, identity.st_mode & 0o777)
        current = os.stat(path)
        if (current.st_dev, current.st_ino) != (identity.st_dev, identity.st_ino):
            raise FileExistsError(path)  # replaced meanwhile (--force): not ours to touch
        os.replace(temporary, path)
    except (OSError, pa.ArrowException):
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return False
    return True
