"""Allocator events from profiler sessions run back to back (TensorFlow; JAX on GPU).

A profiler session hands over its events only when it stops, so a session that
lasted the whole run would leave nothing on disk if the process were killed. The
capture runs sessions of `chunk_s` seconds one after the other and writes each
chunk's events to the trace as soon as the session has stopped: a SIGKILL loses at
most the chunk under way.

Between two sessions the profiler records nothing. The next session is started the
moment the profiler lets it (it refuses while the previous one is still gathering
its events); the gaps are measured from the sessions' own start and stop times and
recorded in the trace, and the allocator's counters on every event and the sampled
counters keep bytes in use and the running peak exact across them.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from google.protobuf.message import DecodeError

from tpumem.trace.schema import CAPTURE_GAP, CAPTURE_RESUMED
from tpumem.trace.writer import TraceWriter
from tpumem.xplane.chunks import Chunk, ChunkConverter
from tpumem.xplane.wire import WireError

_RETRY_S = 0.0005  # how often a refused session start is tried again
# Work that no longer holds the profiler (writing a stopped session out, reading
# it into the trace) yields the CPU to the program: a niceness for its threads.
_BACKGROUND_NICENESS = 19


def _run_in_background(thread_id: int | None) -> None:
    """Lowers one thread's priority (Linux: setpriority takes a thread id)."""
    if thread_id is None or not hasattr(os, "setpriority"):
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, thread_id, _BACKGROUND_NICENESS)


def newest_xspace(logdir: str | Path) -> bytes | None:
    """The XSpace a profiler last wrote under a logdir (TensorBoard's layout)."""
    files = sorted(Path(logdir).glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.parent.name)
    return files[-1].read_bytes() if files else None


class ProfilerSessions(Protocol):
    """A framework's profiler, one session at a time."""

    def open(self) -> Any | None:
        """Starts a session; None while another one still holds the profiler."""

    def collect(self, session: Any) -> bytes:
        """Stops a session and returns its XSpace, serialized."""


@dataclass(slots=True)
class CaptureStats:
    chunks: int = 0
    events: int = 0
    gaps: int = 0
    gap_total_ns: int = 0
    gap_max_ns: int = 0
    covered_ns: int = 0

    def as_metadata(self, chunk_s: float) -> dict[str, Any]:
        span = self.covered_ns + self.gap_total_ns
        return {
            "method": "profiler sessions, back to back",
            "chunk_s": chunk_s,
            "chunks": self.chunks,
            "events": self.events,
            "gaps": self.gaps,
            "gap_total_ns": self.gap_total_ns,
            "gap_max_ns": self.gap_max_ns,
            "covered_fraction": round(self.covered_ns / span, 6) if span else None,
        }


class ProfilerChunks:
    """Runs the sessions in a thread and streams their events into the trace."""

    def __init__(self, writer: TraceWriter, sessions: ProfilerSessions, chunk_s: float) -> None:
        self.writer = writer
        self.sessions = sessions
        self.chunk_s = chunk_s
        self.stats = CaptureStats()
        self.warnings: list[str] = []
        self._converter = ChunkConverter(writer.start_time_ns)
        self._last_stop_ns: int | None = None
        self._lock = threading.Lock()  # one rotation, pause or stop at a time
        self._session: Any | None = None
        self._paused = False
        self._stop = threading.Event()
        # Stopped sessions' XSpaces, in order, for the thread that writes them.
        self._stopped: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="tpumem-profiler", daemon=True)
        self._writer_thread = threading.Thread(
            target=self._write_stopped, name="tpumem-profiler-write", daemon=True
        )

    def start(self) -> None:
        self._session = self.sessions.open()
        if self._session is None:
            self.warnings.append(
                "another profiler session was running when the capture began; allocator "
                "events were captured from when it ended"
            )
        self._writer_thread.start()
        self._thread.start()

    def stop(self) -> None:
        """Ends the last session, writes what is left and the capture's figures
        (metadata `capture`)."""
        self._stop.set()
        self._thread.join()
        with self._lock:
            if self._session is not None:
                self._stopped.put(self.sessions.collect(self._session))
                self._session = None
        self._stopped.put(None)
        self._writer_thread.join()
        self.writer.patch_metadata({"capture": self.stats.as_metadata(self.chunk_s)})

    def pause(self) -> None:
        """Ends the current session now (the program wants the profiler)."""
        with self._lock:
            self._paused = True
            if self._session is not None:
                self._stopped.put(self.sessions.collect(self._session))
                self._session = None

    def resume(self, xspace: bytes | None) -> None:
        """Takes the events of the program's own session, then goes on."""
        with self._lock:
            if xspace is not None:
                self._stopped.put(xspace)
            self._paused = False
            self._session = self.sessions.open()

    def _write_stopped(self) -> None:
        _run_in_background(threading.get_native_id())
        while (xspace := self._stopped.get()) is not None:
            self._write(xspace)

    def _run(self) -> None:
        while not self._stop.wait(self.chunk_s):
            with self._lock:
                if self._paused:
                    continue
                if self._session is None:
                    self._session = self.sessions.open()
                    continue
                self._rotate()

    def _rotate(self) -> None:
        old, collected = self._session, {}

        def collect() -> None:
            collected["xspace"] = self.sessions.collect(old)

        exporter = threading.Thread(target=collect, name="tpumem-profiler-export", daemon=True)
        exporter.start()
        # The profiler lets a new session start once the old one has gathered its
        # events, before it has written them: start the next one at that moment.
        self._session = None
        while self._session is None:
            done = not exporter.is_alive()
            self._session = self.sessions.open()
            if done:
                break
            time.sleep(_RETRY_S)
        # The new session runs: what is left of the export is no longer urgent.
        _run_in_background(exporter.native_id)
        exporter.join()
        if "xspace" in collected:
            self._stopped.put(collected["xspace"])

    def _write(self, xspace: bytes) -> None:
        try:
            chunk = self._converter.convert(xspace)
        except (DecodeError, WireError) as error:
            self.warnings.append(f"a profiler chunk could not be read and was skipped: {error}")
            return
        if chunk.event_count:
            self.writer.write_columns(chunk.events, chunk.event_count)
        if chunk.mark_count:
            self.writer.write_columns(chunk.marks, chunk.mark_count)
        self._account(chunk)

    def _account(self, chunk: Chunk) -> None:
        stats = self.stats
        stats.chunks += 1
        stats.events += chunk.event_count
        if chunk.start_ns is None or chunk.stop_ns is None:
            return
        stats.covered_ns += chunk.stop_ns - chunk.start_ns
        if self._last_stop_ns is not None and chunk.start_ns > self._last_stop_ns:
            gap = chunk.start_ns - self._last_stop_ns
            stats.gaps += 1
            stats.gap_total_ns += gap
            stats.gap_max_ns = max(stats.gap_max_ns, gap)
            # The analysis places allocations it did not see inside these spans.
            self.writer.mark(CAPTURE_GAP, time_ns=self._last_stop_ns)
            self.writer.mark(CAPTURE_RESUMED, time_ns=chunk.start_ns)
        self._last_stop_ns = chunk.stop_ns
