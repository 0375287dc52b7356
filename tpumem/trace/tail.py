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
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from tpumem.trace.live import writing_process
from tpumem.trace.reader import not_a_stream

POLL_S = 0.1  # how often a wait for more bytes looks again (the writer flushes every 0.1 s)


class GrowingFile(io.RawIOBase):
    """A file whose reads wait for the bytes asked for while its writer lives."""

    def __init__(self, path: Path, stop: threading.Event, poll_s: float = POLL_S) -> None:
        self._file = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in close()
        self._stop = stop
        self._poll_s = poll_s

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(view):
            got = self._file.readinto(view[filled:]) or 0
            filled += got
            if got:
                continue
            if self._stop.is_set() or writing_process(self._file.fileno()) is None:
                # Nothing more will come (the writer closed or died): one last look,
                # for what it wrote just before.
                filled += self._file.readinto(view[filled:]) or 0
                break
            time.sleep(self._poll_s)
        return filled

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
    """Waits until `path` exists and holds the stream's start; False if `stop`."""
    while not stop.is_set():
        try:
            if os.path.getsize(path) > 0:
                return True
        except OSError:
            pass
        time.sleep(poll_s)
    return False
