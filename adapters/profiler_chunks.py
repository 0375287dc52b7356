"""Allocator events from profiler sessions run back to back (TensorFlow; JAX on GPU).

A profiler session hands over its events only when it stops, so a session that
lasted the whole run would leave nothing on disk if the process were killed. The
capture runs sessions of `chunk_s` seconds one after the other and writes each
chunk's events to the trace as soon as the session has stopped: a SIGKILL loses at
most the chunk under way.

Between two sessions the profiler records nothing: the old session must hand
over its events before the profiler takes a new one. A session's span is taken
from what this module saw, not from the times the profiler writes into its
XSpace: the profiler stamps its stop time after it has gathered the events, and
on a loaded machine that came up to a second after its tracer had stopped, a
stretch whose allocations were lost while no gap said so. Each session counts
from the moment its start returned to the moment its stop was called; what lies
between two sessions is recorded in the trace as a gap, and a session that ran
much longer than asked (the rotation thread starved of CPU) is counted.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from google.protobuf.message import DecodeError

from tpumem.adapters.quiet import announce_thread
from tpumem.adapters.session_reader import SessionReader
from tpumem.adapters.xspace_chunks import Chunk
from tpumem.trace.metadata import CaptureSummary
from tpumem.trace.schema import CAPTURE_GAP, CAPTURE_RESUMED
from tpumem.trace.writer import TraceWriter
from tpumem.xplane.wire import WireError

_RETRY_S = 0.05  # how soon a start the profiler refused (the script's own session) is retried
_POLL_S = 0.0005  # how often the profiler is asked whether the old session let go
# A session that runs this much past its length is reported as overrun.
_OVERRUN_FACTOR = 1.5


def newest_xspace_file(logdir: str | Path) -> Path | None:
    """The file of the XSpace a profiler last wrote under a logdir (TensorBoard's
    layout)."""
    files = sorted(Path(logdir).glob("plugins/profile/*/*.xplane.pb"), key=lambda p: p.parent.name)
    return files[-1] if files else None


def newest_xspace(logdir: str | Path) -> bytes | None:
    """The XSpace a profiler last wrote under a logdir."""
    file = newest_xspace_file(logdir)
    return file.read_bytes() if file is not None else None


class ProfilerSessions(Protocol):
    """A framework's profiler, one session at a time."""

    def open(self) -> Any | None:
        """Starts a session; None while another one still holds the profiler."""

    def collect(self, session: Any) -> bytes | Path:
        """Stops a session and returns its XSpace, serialized, or a file that holds
        it (the capture's, deleted once read)."""

    def busy(self) -> bool | None:
        """Whether a session still holds the profiler; None when it cannot tell
        without trying a start (which the profiler would log)."""


@dataclass(slots=True)
class CaptureStats:
    chunks: int = 0
    events: int = 0
    gaps: int = 0
    gap_total_ns: int = 0
    gap_max_ns: int = 0
    covered_ns: int = 0
    longest_session_ns: int = 0
    overruns: int = 0  # sessions that ran past _OVERRUN_FACTOR x their length
    reader_cpu_s: float | None = None  # the reader process's (None: read in this one)

    def as_metadata(self, chunk_s: float) -> CaptureSummary:
        span = self.covered_ns + self.gap_total_ns
        return CaptureSummary(
            method="profiler sessions, back to back",
            chunk_s=chunk_s,
            chunks=self.chunks,
            events=self.events,
            gaps=self.gaps,
            gap_total_ns=self.gap_total_ns,
            gap_max_ns=self.gap_max_ns,
            covered_ns=self.covered_ns,
            covered_fraction=round(self.covered_ns / span, 6) if span else None,
            longest_session_ns=self.longest_session_ns,
            sessions_overrun=self.overruns,
            reader_cpu_s=self.reader_cpu_s,
        )


@dataclass(slots=True)
class _Stopped:
    """A stopped session's XSpace (once exported) and the wall-clock span it was
    recording."""

    opened_ns: int | None  # when its start returned (None: the script's own session)
    stopping_ns: int  # when its stop was called
    xspace: bytes | Path = b""
    exported: threading.Event = field(default_factory=threading.Event)

    def result(self) -> bytes | Path:
        self.exported.wait()
        return self.xspace


class ProfilerChunks:
    """Runs the sessions in a thread and streams their events into the trace."""

    def __init__(
        self,
        writer: TraceWriter,
        sessions: ProfilerSessions,
        chunk_s: float,
        label: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.writer = writer
        self.label = label  # fills in what the profiler's events lack
        self.sessions = sessions
        self.chunk_s = chunk_s
        self.stats = CaptureStats()
        self.warnings: list[str] = []
        self._reader = SessionReader(writer.start_time_ns)  # a process of its own
        self._last_stop_ns: int | None = None
        self._lock = threading.Lock()  # one rotation, pause or stop at a time
        self._session: Any | None = None
        self._opened_ns: int | None = None
        self._paused = False
        self._stop = threading.Event()
        self._first_open = threading.Event()
        # Stopped sessions' XSpaces, in order, for the thread that writes them.
        self._stopped: queue.SimpleQueue[_Stopped | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="tpumem-profiler", daemon=True)
        self._writer_thread = threading.Thread(
            target=self._write_stopped, name="tpumem-profiler-write", daemon=True
        )
        # Sessions are stopped (and torn down) on one thread of tpumem's own, so
        # that what the profiler logs about them can be told from the script's.
        self._exports: queue.SimpleQueue[tuple[Any, _Stopped] | None] = queue.SimpleQueue()
        self._export_thread = threading.Thread(
            target=self._export_sessions, name="tpumem-profiler-export", daemon=True
        )

    def start(self) -> None:
        """Returns once the first session runs (opened on the rotation thread, so
        that what the profiler logs about it is tpumem's)."""
        self._writer_thread.start()
        self._export_thread.start()
        self._thread.start()
        self._first_open.wait()
        if self._session is None:
            self.warnings.append(
                "another profiler session was running when the capture began; allocator "
                "events were captured from when it ended"
            )

    def stop(self) -> None:
        """Ends the last session, writes what is left and the capture's figures
        (metadata `capture`)."""
        self._stop.set()
        self._thread.join()
        with self._lock:
            self._collect()
        self._exports.put(None)
        self._stopped.put(None)
        self._export_thread.join()
        self._writer_thread.join()
        self._reader.close()
        self.warnings.extend(self._reader.warnings)
        self.stats.reader_cpu_s = self._reader.cpu_s
        self.writer.patch_metadata(capture=self.stats.as_metadata(self.chunk_s))

    @property
    def recording(self) -> bool:
        """Whether a session of tpumem's records the allocator's events now (read
        without the lock: at a session's edge the answer may be either)."""
        return self._session is not None

    def seconds_to_rotation(self) -> float:
        """About how long until the session under way stops (0: none is under way,
        or it is due)."""
        opened = self._opened_ns
        if self._session is None or opened is None:
            return 0.0
        return max(0.0, self.chunk_s - (time.time_ns() - opened) / 1e9)

    def pause(self) -> None:
        """Ends the current session now (the program wants the profiler)."""
        with self._lock:
            self._paused = True
            self._collect()

    def resume(self, xspace: bytes | None) -> None:
        """Takes the events of the program's own session, then goes on."""
        with self._lock:
            if xspace is not None:
                stopped = _Stopped(None, time.time_ns(), xspace)
                stopped.exported.set()  # handed over already
                self._stopped.put(stopped)
            self._paused = False
            if not self._stop.is_set():  # (stopped for good while the script's ran)
                self._open()

    def _open(self) -> None:
        self._session = self.sessions.open()
        self._opened_ns = time.time_ns() if self._session is not None else None

    def _stop_session(self) -> _Stopped | None:
        """Hands the session under way to the export thread, which stops it."""
        if self._session is None:
            return None
        stopped = _Stopped(self._opened_ns, time.time_ns())
        self._exports.put((self._session, stopped))
        self._session = None
        self._stopped.put(stopped)
        return stopped

    def _collect(self) -> None:
        """Stops the session under way (holding the lock); returns once it let go."""
        stopped = self._stop_session()
        if stopped is not None:
            stopped.exported.wait()

    def _rotate(self) -> None:
        """Stops the session under way and starts the next one as soon as the
        profiler lets go of the old one, which is before it has written the old
        one's events out. A start the profiler refuses is logged, so the next
        start waits for the profiler to say it is free rather than trying."""
        stopped = self._stop_session()
        if stopped is not None:
            if self.sessions.busy() is None:  # cannot tell: wait for the whole export
                stopped.exported.wait()
            while not stopped.exported.is_set() and self.sessions.busy():
                time.sleep(_POLL_S)
        self._open()

    def _export_sessions(self) -> None:
        announce_thread()
        while (item := self._exports.get()) is not None:
            session, stopped = item
            item = None
            try:
                stopped.xspace = self.sessions.collect(session)
            except Exception as error:  # the profiler failed this session: go on
                self.warnings.append(f"a profiler session could not be stopped: {error}")
            finally:
                session = None  # torn down here, on this thread
                stopped.exported.set()

    def _write_stopped(self) -> None:
        # At normal priority: the session's decoding is the reader process's
        # (session_reader.py, at the lowest priority); this thread labels and
        # writes its rows holding the GIL, and at the lowest priority it could be
        # preempted holding it, keeping the training loop's thread waiting.
        announce_thread()
        while (stopped := self._stopped.get()) is not None:
            self._write(stopped)

    def _run(self) -> None:
        announce_thread()
        with self._lock:
            self._open()
        self._first_open.set()
        wait = self.chunk_s if self._session is not None else _RETRY_S
        while not self._stop.wait(wait):
            with self._lock:
                if self._paused:
                    continue
                if self._session is not None:
                    self._rotate()
                else:
                    self._open()
                # Refused (the script started its own): try again soon, not a chunk later.
                wait = self.chunk_s if self._session is not None else _RETRY_S

    def _write(self, stopped: _Stopped) -> None:
        xspace = stopped.result()
        try:
            chunk = self._reader.convert(xspace)
        except (DecodeError, WireError) as error:
            self.warnings.append(f"a profiler chunk could not be read and was skipped: {error}")
            return
        finally:
            if isinstance(xspace, Path):
                with contextlib.suppress(OSError):
                    xspace.unlink(missing_ok=True)
        if chunk.event_count:
            events = self.label(chunk.events) if self.label else chunk.events
            self.writer.write_columns(events, chunk.event_count)
        if chunk.mark_count:
            self.writer.write_columns(chunk.marks, chunk.mark_count)
        self._account(chunk, stopped)

    def _span(self, chunk: Chunk, stopped: _Stopped) -> tuple[int | None, int | None]:
        """The stretch the session recorded, on the trace's clock: inside both what
        the profiler stamped and the calls that started and stopped it."""
        origin = self.writer.start_time_ns
        start, stop = chunk.start_ns, stopped.stopping_ns - origin
        if stopped.opened_ns is not None:
            opened = stopped.opened_ns - origin
            start = opened if start is None else max(start, opened)
        if chunk.stop_ns is not None:
            stop = min(stop, chunk.stop_ns)
        if start is None:
            return None, None
        return start, max(start, stop)

    def _account(self, chunk: Chunk, stopped: _Stopped) -> None:
        stats = self.stats
        stats.chunks += 1
        stats.events += chunk.event_count
        start, stop = self._span(chunk, stopped)
        if start is None or stop is None:
            return
        length = stop - start
        stats.covered_ns += length
        stats.longest_session_ns = max(stats.longest_session_ns, length)
        if stopped.opened_ns is not None and length > _OVERRUN_FACTOR * self.chunk_s * 1e9:
            stats.overruns += 1
        if self._last_stop_ns is not None and start > self._last_stop_ns:
            gap = start - self._last_stop_ns
            stats.gaps += 1
            stats.gap_total_ns += gap
            stats.gap_max_ns = max(stats.gap_max_ns, gap)
            # The analysis places allocations it did not see inside these spans.
            self.writer.mark(CAPTURE_GAP, time_ns=self._last_stop_ns)
            self.writer.mark(CAPTURE_RESUMED, time_ns=start)
        self._last_stop_ns = stop
