"""Streams a trace to disk while the profiled program runs.

Rows are buffered in memory and written as one Arrow record batch at most every
`flush_interval_s` (0.1 s by default) by a daemon thread, and handed to the OS at
once: a crash or a SIGKILL of the process loses at most the rows of the last
interval. A clean close writes the stream's end-of-stream marker, which is how a
reader tells a finished trace from one whose writer died.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

from tpumem.trace.columns import record_batch, rows_to_batch
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


class TraceWriter:
    """Writes one trace file. Thread-safe; use as a context manager."""

    def __init__(
        self,
        path: str | Path,
        metadata: Mapping[str, Any],
        *,
        flush_interval_s: float = 0.1,
    ) -> None:
        header = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, **metadata}
        header.setdefault("start_time_ns", time.time_ns())
        self.start_time_ns: int = header["start_time_ns"]
        self._file: BinaryIO = open(path, "wb")  # noqa: SIM115 - closed in close()
        schema = SCHEMA.with_metadata({METADATA_KEY: json.dumps(header).encode()})
        self._stream = pa.ipc.new_stream(self._file, schema)
        self._file.flush()
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
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

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def now_ns(self) -> int:
        """The trace clock: nanoseconds since the trace's start."""
        return time.time_ns() - self.start_time_ns

    def record(self, kind: str, **fields: Any) -> None:
        fields["kind"] = kind
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

    def patch_metadata(self, patch: Mapping[str, Any]) -> None:
        """Adds to the metadata after the header was written (exit status,
        warnings); readers merge the patches in order."""
        self.record(META, text=json.dumps(patch))

    def write_columns(self, columns: Mapping[str, Any], num_rows: int) -> None:
        """Writes many rows at once (importers); pending single rows go first."""
        with self._lock:
            self._write_pending()
            self._stream.write_batch(record_batch(columns, num_rows))
            self._file.flush()

    def flush(self) -> None:
        with self._lock:
            self._write_pending()

    def close(self) -> None:
        if self._flusher is not None:
            self._stop.set()
            self._flusher.join()
        with self._lock:
            if self._closed:
                return
            self._write_pending()
            self._stream.close()
            self._file.close()
            self._closed = True

    def _write_pending(self) -> None:
        if self._closed or not self._rows:
            return
        rows, self._rows = self._rows, []
        self._stream.write_batch(rows_to_batch(rows))
        self._file.flush()

    def _flush_periodically(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            self.flush()
