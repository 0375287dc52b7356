"""Streams a trace to disk while the profiled program runs.

Rows are buffered in memory and written as one Arrow record batch at most every
`flush_interval_s` (0.1 s by default) by a daemon thread, and handed to the OS at
once: a crash or a SIGKILL of the process loses at most the rows of the last
interval. A clean close writes the stream's end-of-stream marker, which is how a
reader tells a finished trace from one whose writer died; and the writer holds a
lock on the file while it is open (trace/live.py), which is how a reader tells a
trace still being written from one whose writer died.

Writing never fails the profiled program: when the disk fills (or any write
fails), the writer stops, and on closing cuts the file back to its last whole
batch and ends it with a warning that says where and why it stopped. A process
forked from the one that opened the trace writes nothing to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from tpumem.threads import leave_signals_to_the_script
from tpumem.trace.amend import metadata_tail
from tpumem.trace.columns import record_batch, rows_to_batch
from tpumem.trace.live import hold_for_writing
from tpumem.trace.metadata import metadata_json
from tpumem.trace.records import merge_metadata
from tpumem.trace.schema import (
    ALLOC,
    FORMAT_NAME,
    FORMAT_VERSION,
    FREE,
    MARK,
    META,
    METADATA_KEY,
    SAMPLE,
    SCHEMA,
)

FLUSH_INTERVAL_S = 0.1  # rows go to the file this often: what a SIGKILL can lose


class TraceWriter:
    """Writes one trace file. Thread-safe; use as a context manager."""

    def __init__(
        self,
        path: str | Path | int,
        metadata: Mapping[str, Any],
        *,
        flush_interval_s: float = FLUSH_INTERVAL_S,
    ) -> None:
        """`path`: a file name, or the descriptor of a file opened for writing;
        `metadata`: the header's fields, as TraceMetadata names and types them."""
        self._owner = os.getpid()
        # Unbuffered: nothing waits in Python's buffer to be written late, after a
        # failed write has been cut off (see _end_after_failure).
        self._file: BinaryIO = open(path, "wb", buffering=0)  # noqa: SIM115 - closed in close()
        hold_for_writing(self._file.fileno())  # let go when the file closes or the process ends
        self.failed: OSError | None = None  # the write that stopped the trace
        self._failed_at_ns = 0
        self._lock = threading.Lock()
        self._header(metadata)
        self._closed = False
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        if flush_interval_s > 0:
            self._flusher = threading.Thread(
                target=self._flush_periodically,
                args=(flush_interval_s,),
                name="tpumem-trace-flush",
                daemon=True,
            )
            self._flusher.start()

    def _header(self, metadata: Mapping[str, Any]) -> None:
        header = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            **metadata_json(metadata),
        }
        header.setdefault("start_time_ns", time.time_ns())
        self.header: dict[str, Any] = header  # as written (its patches come after)
        self.start_time_ns: int = header["start_time_ns"]
        self._schema = SCHEMA.with_metadata({METADATA_KEY: json.dumps(header).encode()})
        self._stream = pa.ipc.new_stream(self._file, self._schema)
        # Arrow writes the schema (and the header in it) with the first batch: a
        # batch of no rows puts it on disk now, so that a process killed before its
        # first flush leaves a trace its ending can be appended to, not an empty file.
        self._stream.write_batch(record_batch({}, 0))
        self._file.flush()
        self._whole = self._file.tell()  # where the last whole message ends
        self._rows: list[dict[str, Any]] = []
        self.rows_recorded = 0  # all but metadata: whether the process recorded anything

    def begin_again(self, metadata: Mapping[str, Any]) -> None:
        """The trace starts over in the same file, with this header; what was
        written goes. A recording that yields to another framework's does so
        (adapters/import_watch.py: PyTorch/XLA imported after torch)."""
        with self._lock:
            if self._closed or not self._owns() or self.failed is not None:
                return
            try:
                self._file.seek(0)
                self._file.truncate()
                self._header(metadata)
            except OSError as error:
                self._fail(error)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now_ns(self) -> int:
        """The trace clock: nanoseconds since the trace's start."""
        return time.time_ns() - self.start_time_ns

    def record(self, kind: str, **fields: Any) -> None:
        if self.failed is not None and kind != META:
            return  # the trace stopped; only how the run ended is still kept
        fields["kind"] = kind
        if kind != META:
            self.rows_recorded += 1
        if fields.get("time_ns") is None:
            fields["time_ns"] = self.now_ns()
        with self._lock:
            self._rows.append(fields)

    def alloc(self, **fields: Any) -> None:
        self.record(ALLOC, **fields)

    def free(self, **fields: Any) -> None:
        self.record(FREE, **fields)

    def sample(self, **fields: Any) -> None:
        self.record(SAMPLE, **fields)

    def mark(self, name: str, step: int | None = None, **fields: Any) -> None:
        self.record(MARK, text=name, step=step, **fields)

    def patch_metadata(self, **fields: Any) -> None:
        """Adds to the metadata after the header was written (exit status,
        warnings): TraceMetadata's fields, typed; readers merge the patches in order."""
        self.record(META, text=json.dumps(metadata_json(fields)))

    def write_columns(self, columns: Mapping[str, Any], num_rows: int) -> None:
        """Writes many rows at once (importers); pending single rows go first."""
        self.rows_recorded += num_rows
        with self._lock:
            self._write_pending()
            self._write(record_batch(columns, num_rows))

    def flush(self) -> None:
        with self._lock:
            self._write_pending()

    def close(self) -> None:
        if self._flusher is not None and self._flusher.is_alive():
            self._stop.set()
            self._flusher.join()
        with self._lock:
            if self._closed or not self._owns():
                return
            self._write_pending()
            if self.failed is None:
                try:
                    self._stream.close()
                    self._file.flush()
                except OSError as error:
                    self._fail(error)
            if self.failed is not None:
                self._end_after_failure()
            self._closed = True
            with contextlib.suppress(OSError):  # what could be written was
                self._file.close()

    def _owns(self) -> bool:
        """False in a process forked from the writer's: its rows are not this trace's."""
        return os.getpid() == self._owner

    def _write_pending(self) -> None:
        if self._closed or not self._rows or not self._owns() or self.failed is not None:
            return  # (after a failure, rows stay: their metadata ends the trace)
        rows, self._rows = self._rows, []
        self._write(rows_to_batch(rows))
        if self.failed is not None:
            self._rows = [row for row in rows if row["kind"] == META]

    def _write(self, batch: pa.RecordBatch) -> None:
        if self.failed is not None or not self._owns():
            return  # the trace stopped at its last whole batch
        try:
            self._stream.write_batch(batch)
            self._file.flush()
            self._whole = self._file.tell()
        except OSError as error:
            self._fail(error)

    def _fail(self, error: OSError) -> None:
        if self.failed is None:
            self.failed, self._failed_at_ns = error, self.now_ns()

    def _end_after_failure(self) -> None:
        """Cuts the file back to its last whole batch, and ends it with a warning if
        the disk has room for one (cutting the partial batch may have made some)."""
        assert self.failed is not None
        why = self.failed.strerror or str(self.failed)
        # The metadata recorded since (how the run ended) is small, and kept.
        patch: dict[str, Any] = {}
        for row in self._rows:
            if row["kind"] == META:
                patch = merge_metadata(patch, json.loads(row["text"]))
        patch["warnings"] = [
            *patch.get("warnings", []),
            f"writing the trace failed at {self._failed_at_ns / 1e9:.3f} s ({why}); "
            "it holds what was written before, and nothing after",
        ]
        descriptor = self._file.fileno()
        try:
            os.ftruncate(descriptor, self._whole)
            tail = metadata_tail(self._schema, patch, self._failed_at_ns)
            if os.pwrite(descriptor, tail, self._whole) != len(tail):
                os.ftruncate(descriptor, self._whole)
        except OSError:
            with contextlib.suppress(OSError):  # a reader stops at the last whole batch
                os.ftruncate(descriptor, self._whole)

    def _flush_periodically(self, interval_s: float) -> None:
        leave_signals_to_the_script()
        while not self._stop.wait(interval_s):
            self.flush()
