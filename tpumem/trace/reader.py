"""Loads a trace file, refusing what is not one and keeping what a cut or damaged
file holds.

A trace is read as untrusted input: every record batch is validated in full before
any of it is used (a damaged offset would otherwise send pyarrow past its buffers),
the columns must have the format's types, the rows' values must be ones a device
could give (trace/values.py) and the JSON records what the format describes
(trace/records.py). What fails stops the reading there, or is left out, and the
trace's warnings say so; what was read before it stands.
"""

from __future__ import annotations

import mmap
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from tpumem.errors import TpumemError
from tpumem.trace import arrow_arrays
from tpumem.trace.live import writing_process
from tpumem.trace.metadata import TraceMetadata
from tpumem.trace.model import Trace
from tpumem.trace.records import dropped_warning, merge_metadata, parse_object
from tpumem.trace.schema import (
    END_OF_STREAM,
    FORMAT_NAME,
    FORMAT_VERSION,
    META,
    METADATA_KEY,
    SCHEMA,
)
from tpumem.trace.values import sane

# Batches are joined into chunks of at least this many rows: a long run's writer
# flushes ten small batches a second, and the analysis costs by chunk as well as by row.
CHUNK_ROWS = 1 << 16
GROUP_BATCHES = 1024


def _header(schema: pa.Schema, path: str) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise TpumemError(f"{path}: an Arrow stream, but not a tpumem trace")
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        raise TpumemError(f"{path}: the trace header is not UTF-8 text") from None
    header = parse_object(text)
    if header is None:
        raise TpumemError(f"{path}: the trace header is not a JSON object")
    if header.get("format") != FORMAT_NAME:
        raise TpumemError(f"{path}: not a tpumem trace")
    version = header.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TpumemError(f"{path}: the trace's format version {version!r} is not one tpumem knows")
    if version > FORMAT_VERSION:
        raise TpumemError(
            f"{path}: trace format version {version} is newer than this tpumem reads "
            f"({FORMAT_VERSION}); upgrade tpumem"
        )
    return header


def _columns(schema: pa.Schema, path: str) -> None:
    """The stream's columns can be read as the format's: `kind` among them, none twice."""
    try:
        names = schema.names
    except UnicodeDecodeError:
        raise TpumemError(f"{path}: the trace's column names are not UTF-8 text") from None
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise TpumemError(f"{path}: the trace has column {twice[0]!r} more than once")
    if "kind" not in names:
        raise TpumemError(f"{path}: the trace has no 'kind' column")


def _conform(table: pa.Table, path: str) -> pa.Table:
    """The format's columns and types: columns an older writer did not have are
    added as nulls, unknown ones dropped, and ones of another type cast losslessly."""
    columns = []
    for field in SCHEMA:
        if field.name not in table.column_names:
            columns.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        if column.type != field.type:
            try:
                column = column.cast(field.type)
            except (pa.ArrowException, ValueError):
                raise TpumemError(
                    f"{path}: the trace's column {field.name!r} holds {column.type}, "
                    f"which is not {field.type}"
                ) from None
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def _read_batches(
    reader: pa.ipc.RecordBatchStreamReader, release: Callable[[], None]
) -> tuple[pa.Table, bool]:
    """The whole, valid batches as a table of few chunks, and whether something
    after them was not whole or valid. Batches are joined as they are read (their
    dictionaries unified), so a long run's many small batches cost by row."""
    chunks: list[pa.RecordBatch] = []
    group: list[pa.RecordBatch] = []
    rows, damaged = 0, False
    while True:
        try:
            batch = reader.read_next_batch()
            batch.validate(full=True)
        except StopIteration:
            break
        except (pa.ArrowException, OSError, ValueError):
            damaged = True
            break
        if batch.num_rows >= CHUNK_ROWS:
            release()  # large enough as it is, and not copied
            chunks += _join(group, reader.schema)
            chunks.append(batch)
            group, rows = [], 0
            continue
        group.append(batch)
        rows += batch.num_rows
        if rows >= CHUNK_ROWS or len(group) >= GROUP_BATCHES:
            chunks += _join(group, reader.schema)
            group, rows = [], 0
    chunks += _join(group, reader.schema)
    return pa.Table.from_batches(chunks, reader.schema), damaged


def _join(group: list[pa.RecordBatch], schema: pa.Schema) -> list[pa.RecordBatch]:
    if len(group) < 2:
        return group
    batches: list[Any] = pa.Table.from_batches(group, schema).combine_chunks().to_batches()
    return batches


def _metadata(header: dict[str, Any], table: pa.Table) -> TraceMetadata:
    """The header with every patch merged in, as the format describes it."""
    merged, unreadable = header, 0
    rows = np.flatnonzero(arrow_arrays.equal_to(table.column("kind"), META))
    for text in arrow_arrays.texts_at(table.column("text"), rows):
        patch = parse_object(text)
        if patch is None:
            unreadable += 1
        else:
            merged = merge_metadata(merged, patch)
    dropped: list[str] = []
    metadata = TraceMetadata.from_json(merged, dropped)
    if unreadable:
        metadata = metadata.with_warnings(
            f"left out {unreadable:,} metadata rows that were not JSON objects"
        )
    if dropped:
        metadata = metadata.with_warnings(dropped_warning("the trace's metadata", dropped))
    return metadata


def trace_file_info(name: str) -> os.stat_result:
    """What a trace may be, for every command that reads one (report, watch): a
    regular file, a link to one followed; not a directory, a device (/dev/zero), a
    pipe, nor a file the kernel makes as it is read (/proc's, whose size says 0:
    /proc/self/mem). One line for anything else; FileNotFoundError, and the other
    OSErrors of looking, pass to the caller."""
    info = os.stat(name)  # (no open: opening a device or a FIFO may block or act)
    if stat.S_ISDIR(info.st_mode):
        raise TpumemError(f"{name}: is a directory, not a trace file")
    if not stat.S_ISREG(info.st_mode):
        raise TpumemError(f"{name}: not a regular file, so not a trace")
    if info.st_size == 0 and _made_as_read(name):
        raise TpumemError(
            f"{name}: not a regular file (the kernel makes it as it is read), so not a trace"
        )
    return info


def _made_as_read(name: str) -> bool:
    """Whether a file whose size says 0 reads something anyway (or an error): one
    the kernel makes (/proc), never a trace, which an empty file may yet become."""
    try:
        descriptor = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # (the reader says why it cannot be read)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return False  # (another file took the name meanwhile: the next look says)
        try:
            first = os.read(descriptor, 1)
        except OSError:
            return True
        return bool(first) and os.fstat(descriptor).st_size == 0
    finally:
        os.close(descriptor)


def _open(name: str) -> tuple[mmap.mmap, int | None]:
    """The file's bytes, mapped, and the process still writing it (trace/live.py);
    one line for anything that is not a readable file."""
    try:
        info = trace_file_info(name)
        if info.st_size == 0:
            raise TpumemError(f"{name}: empty file, not a tpumem trace")
        # Python's mmap, not Arrow's: its pages can be given back once read (Trace).
        with open(name, "rb") as handle:
            writer = writing_process(handle.fileno())
            return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ), writer
    except FileNotFoundError:
        raise TpumemError(f"{name}: no such file") from None
    except OSError as error:
        raise TpumemError(f"{name}: cannot read: {error.strerror or error}") from None


# A pickle of protocol 2 to 5 starts with PROTO and its number: what PyTorch's
# memory snapshots are (`tpumem import` reads them; snapshots/importing.py).
PICKLE_STARTS = tuple(bytes([0x80, protocol]) for protocol in range(2, 6))


def not_a_stream(name: str, start: bytes) -> TpumemError:
    """Why a file whose Arrow stream does not open is no trace, from its first
    bytes: a stream's start (a continuation marker) cut short, or something else."""
    if start == b"\xff\xff\xff\xff":
        return TpumemError(f"{name}: truncated before the end of its header")
    if start[:2] in PICKLE_STARTS:
        return TpumemError(
            f"{name}: a pickle, not a tpumem trace (a PyTorch memory snapshot? "
            f"tpumem import {name} reads it into one)"
        )
    return TpumemError(f"{name}: not a tpumem trace (not an Arrow stream)")


def is_trace(path: str | Path) -> bool:
    """Whether the regular file at `path` starts as a tpumem trace does: an Arrow
    stream whose schema carries tpumem's header (for a command given one where it
    takes something else: import)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with pa.OSFile(str(path)) as file:
            schema = pa.ipc.open_stream(file).schema
    except (OSError, pa.ArrowException, ValueError):
        return False
    return METADATA_KEY in (schema.metadata or {})


def load(path: str | Path, shown_as: str | None = None) -> Trace:
    """Reads a trace. A file cut short (its writer was killed), still being written
    or damaged loads up to its last whole, valid record batch and says so in its
    warnings. `shown_as`: the path the trace goes by (a profile's, when the trace
    is imported from it)."""
    name = str(path)
    mapping, writer = _open(name)
    source = pa.BufferReader(pa.py_buffer(mapping))
    try:
        reader = pa.ipc.open_stream(source)
    except (pa.ArrowException, OSError, ValueError) as error:
        raise not_a_stream(name, mapping[:4]) from error
    header = _header(reader.schema, name)
    _columns(reader.schema, name)
    release = _releaser(mapping)
    table, damaged = _read_batches(reader, release)
    table = _conform(table, name)
    table, notes = sane(table, release)
    metadata = _metadata(header, table).with_warnings(*notes)
    # Complete: closed by its writer, which a cut or killed run's trace is not.
    complete = mapping[-len(END_OF_STREAM) :] == END_OF_STREAM
    if damaged and complete:
        metadata = metadata.with_warnings(
            f"the trace is damaged after its first {table.num_rows:,} rows; loaded those"
        )
    elif not complete and writer is not None:
        metadata = metadata.with_warnings(
            f"the trace is still being written (by process {writer}); loaded the "
            f"{table.num_rows:,} rows written so far: the run has not ended"
        )
    elif not complete:
        metadata = metadata.with_warnings(
            f"the trace was not closed by its writer (the process crashed or was "
            f"killed); loaded the {table.num_rows:,} rows written before that"
        )
    release()
    pa.default_memory_pool().release_unused()  # what checking the values used
    return Trace(
        path=shown_as or name,
        metadata=metadata,
        table=table,
        complete=complete,
        damaged=damaged,
        running=not complete and writer is not None,
        mapping=mapping,
    )


def batches_trace(batches: list[pa.RecordBatch], schema: pa.Schema, name: str) -> Trace:
    """Rows of a trace read while it is written (trace/tail.py), checked as load
    checks a file's: what a run's live figures are read from."""
    header = _header(schema, name)
    _columns(schema, name)
    table = _conform(pa.Table.from_batches(batches, schema), name)
    table, notes = sane(table)
    return Trace(
        path=name,
        metadata=_metadata(header, table).with_warnings(*notes),
        table=table,
        complete=False,
        running=True,
    )


def _releaser(mapping: mmap.mmap) -> Callable[[], None]:
    """Gives back the pages of the file read so far (checking a large trace reads
    it all); they come back from the page cache when the analysis reads them."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return lambda: None
    return lambda: mapping.madvise(mmap.MADV_DONTNEED)
