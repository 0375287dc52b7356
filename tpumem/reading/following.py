"""A trace followed while its run writes it: a thread reads its batches as they
land (trace/tail.py) and `update()` turns what came into the run's live figures
(analysis/live_figures.py). For `tpumem watch` and `tpumem profile`'s live line;
it reads the file only, so the profiled process does no work for it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pyarrow as pa

from tpumem.analysis.live_figures import RunningFigures
from tpumem.errors import TpumemError
from tpumem.threads import leave_signals_to_the_script
from tpumem.trace.live import writing_process_at
from tpumem.trace.reader import batches_trace
from tpumem.trace.tail import TraceTail, wait_for


class RunFollower:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.figures = RunningFigures()
        self.stop = threading.Event()  # set: read no more
        self.ended = threading.Event()  # set: the stream ended (or could not be read)
        self.error: str | None = None  # why it could not be read
        self.started = False  # the trace's start was read
        self.start_time_ns: int | None = None  # the run's start, by the wall clock (its header)
        self.written = False  # a process was writing it when it was first read
        self.identity: tuple[int, int] | None = None  # (device, inode) of the file followed
        self._schema: pa.Schema | None = None
        self._pending: list[pa.RecordBatch] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="tpumem-follow", daemon=True)

    def start(self) -> RunFollower:
        self._thread.start()
        return self

    def _read(self) -> None:
        leave_signals_to_the_script()
        try:
            if not wait_for(self.path, self.stop):
                return
            self.written = writing_process_at(self.path) is not None
            self.identity = _identity(self.path)
            tail = TraceTail(self.path, self.stop)
            self._schema = tail.schema
            self.started = True
            try:
                for batch in tail:
                    with self._lock:
                        self._pending.append(batch)
            finally:
                tail.close()
        except (TpumemError, OSError) as error:
            self.error = str(error)
        except Exception as error:  # (a follower never fails its caller)
            why = str(error) or type(error).__name__  # (a MemoryError says nothing)
            self.error = f"{self.path}: could not be followed: {why}"
        finally:
            self.ended.set()

    def update(self) -> RunningFigures:
        """The figures, with every batch read since the last update."""
        with self._lock:
            pending, self._pending = self._pending, []
        if pending and self._schema is not None:
            try:
                piece = batches_trace(pending, self._schema, str(self.path))
                self.start_time_ns = piece.metadata.start_time_ns
                self.figures.add(piece)
            except TpumemError as error:  # (a header unlike a trace's)
                self.error = str(error)
                self.stop.set()
            except Exception as error:  # (rows it cannot read end the following)
                self.error = f"{self.path}: rows that could not be read: {error}"
                self.stop.set()
        return self.figures

    def name_lost(self) -> str | None:
        """What became of the name of the file followed: "deleted" where no file
        bears it now, "replaced" where another does; None where it still names it."""
        if self.identity is None:
            return None
        now = _identity(self.path)
        if now is None:
            return "deleted"
        return None if now == self.identity else "replaced"

    def elapsed_s(self) -> float:
        """How long the run has run: by the wall clock from its start while it
        is written, else to its last row."""
        if self.ended.is_set() or not self.written or self.start_time_ns is None:
            return self.figures.last_time_ns / 1e9
        return max(time.time_ns() - self.start_time_ns, self.figures.last_time_ns) / 1e9

    def close(self, timeout_s: float = 2.0) -> None:
        self.stop.set()
        self._thread.join(timeout_s)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino
