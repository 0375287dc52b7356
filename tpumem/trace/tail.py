"""A trace read while its writer still appends to it, batch by batch, as `tail -f`
reads a log: for `tpumem watch` and the live line of `tpumem profile`.

The file is read through GrowingFile, whose reads wait for the bytes Arrow asks
for while a process still holds the trace open for writing (trace/live.py) and
end at what there is once none does, so Arrow's own stream reader reads whole
batches as they land, dictionaries and all. Each batch is read once: following
a run costs what its trace grows by, not its size at every look.
"""

from __future__ import annotations

import io
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from tpumem.errors import TpumemError
from tpumem.trace.live import writing_process
from tpumem.trace.reader import not_a_stream, trace_file_info

POLL_S = 0.1  # how often a wait for more bytes looks again (the writer flushes every 0.1 s)
READ_PIECE = 1 << 24  # a read's bytes are held at most this many more than the file gives


class GrowingFile(io.RawIOBase):
    """A file whose reads wait for the bytes asked for while its writer lives."""

    def __init__(self, path: Path, stop: threading.Event, poll_s: float = POLL_S) -> None:
        # Not blocking on the open, and held to a regular file once open: a FIFO
        # given the name after it was looked at would wait for a writer for ever.
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise TpumemError(f"{path}: not a regular file, so not a trace")
        self._file = os.fdopen(descriptor, "rb", buffering=0)
        self._stop = stop
        self._poll_s = poll_s

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        """Up to `size` bytes, read a piece at a time: what a batch's message says
        its body holds is held in memory only as the file holds it (a hostile
        header that claims a terabyte reads as the cut file it is)."""
        if size is None or size < 0:
            return self.readall()
        pieces, got = [], 0
        while got < size:
            piece = self._piece(min(size - got, READ_PIECE))
            if not piece:
                break
            pieces.append(piece)
            got += len(piece)
        return b"".join(pieces)

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        with memoryview(buffer) as view, view.cast("B") as bytes_view:
            piece = self.read(len(bytes_view))
            bytes_view[: len(piece)] = piece
        return len(piece)

    def _piece(self, size: int) -> bytes:
        """Up to `size` bytes, waited for while the writer lives; b"" at the end."""
        while True:
            got = self._file.read(size)
            if got:
                return got
            if self._stop.is_set() or writing_process(self._file.fileno()) is None:
                # Nothing more will come (the writer closed or died): one last look,
                # for what it wrote just before.
                return self._file.read(size) or b""
            time.sleep(self._poll_s)

    def close(self) -> None:
        self._file.close()
        super().close()


class TraceTail:
    """A trace's record batches as its writer writes them; the iteration ends
    when the stream does: closed by its writer, or cut where a writer that died
    (or `stop`) left it."""

    def __init__(self, path: Path, stop: threading.Event) -> None:
        self._source = GrowingFile(path, stop)
        try:
            self._reader = pa.ipc.open_stream(self._source)
        except (pa.ArrowException, OSError, ValueError):
            self._source.close()
            with open(path, "rb") as start:
                raise not_a_stream(str(path), start.read(4)) from None
        self.schema: pa.Schema = self._reader.schema
        self.cut = False  # it ended on a batch not whole or not valid

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        while True:
            try:
                batch = self._reader.read_next_batch()
                batch.validate(full=True)  # (as load checks each: a damaged one ends it)
            except StopIteration:
                return
            except (pa.ArrowException, OSError, ValueError):
                self.cut = True
                return  # cut mid-batch, or damaged
            yield batch

    def close(self) -> None:
        self._source.close()


def wait_for(path: Path, stop: threading.Event, poll_s: float = POLL_S) -> bool:
    """Waits until `path` exists and holds the stream's start; False if `stop`.
    Only for what may become a trace: what never will (a directory, a device, a
    FIFO: report's rule, trace_file_info) is one line at once, not a wait."""
    while not stop.is_set():
        try:
            if trace_file_info(str(path)).st_size > 0:
                return True
        except FileNotFoundError:
            pass  # (not made yet: its run has not started)
        except OSError as error:
            raise TpumemError(f"{path}: cannot read: {error.strerror or error}") from None
        time.sleep(poll_s)
    return False
