"""Profiler sessions read into trace columns in a process of their own.

Reading a session (decoding its XSpace's memory events into trace columns) costs
about 0.5 us an event with the C kernels (1.6 us with the numpy decoder): 10-11
ms of CPU for each second of the TensorFlow transformer example, on a thread
that holds the GIL for much of it, on the cores the program trains on. A reader
process at the lowest CPU priority does it instead, on time the program leaves
idle; the profiled process hands each session over and takes its columns back.
A session the profiler wrote to a file crosses as the file's name (the reader
reads the file: the profiled process neither reads it back nor copies its
megabytes into a pipe); one in memory crosses as its bytes. The columns come
back as a pickle (tpumem's own objects, between two processes of one run),
written into a file in memory that both processes hold (Linux's memfd), with only
its length on the pipe: two megabytes through a pipe wake the profiled process
for each piece of them. Taking a session's rows back costs it 1.2-1.4 ms of CPU
so, 1.6-1.9 ms through the pipe.

If the reader process cannot start, or ends, the sessions are read in the
profiled process from then on, and a warning says what that loses.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import IO

from google.protobuf.message import DecodeError

try:
    import fcntl
except ImportError:  # (Windows)
    fcntl = None  # type: ignore[assignment]

from tpumem.adapters.launch_protocol import FOLLOW_VARIABLE
from tpumem.adapters.xspace_chunks import Chunk, ChunkConverter
from tpumem.xplane.wire import WireError

# A message either way: a byte saying what it holds, its length, then its payload.
_LENGTH = struct.Struct("<Q")
_BYTES, _FILE = 0, 1  # a session: its XSpace's bytes, or the name of its file
_CHUNK, _UNREADABLE, _DONE, _CHUNK_IN_FILE = 0, 1, 2, 3  # the reader's answers
_EXIT_WAIT_S = 5.0
_PIPE_BYTES = 1 << 20


class _Lost(Exception):
    """The reader process is gone, or answered what no reader writes."""


class SessionReader:
    """Converts successive sessions' XSpaces, in order, as ChunkConverter does: in
    a reader process where one runs, else in this one."""

    def __init__(self, trace_start_ns: int) -> None:
        self.trace_start_ns = trace_start_ns
        self.warnings: list[str] = []
        self.cpu_s: float | None = None  # the reader process's CPU time, once closed
        self.read_elsewhere = 0  # sessions the reader process read
        self._converter: ChunkConverter | None = None  # this process's, once needed
        self._answers = _answer_file()  # a descriptor; None: answers come on the pipe
        self._process = self._launch()

    @property
    def in_process(self) -> bool:
        return self._process is None

    def convert(self, xspace: bytes | Path) -> Chunk:
        """The session's rows, from its XSpace's bytes or the file that holds them;
        raises DecodeError or WireError for bytes that are not a readable XSpace,
        and WireError for a file that cannot be read, wherever they were read."""
        if self._process is not None:
            try:
                chunk = self._exchange(self._process, xspace, self._answers)
            except _Lost as error:
                self._lose(str(error))
            else:
                self.read_elsewhere += 1
                return chunk
        if self._converter is None:
            self._converter = ChunkConverter(self.trace_start_ns)
        return self._converter.convert(_read(xspace))

    def close(self) -> None:
        """Ends the reader process, once it has read everything it was given."""
        process, self._process = self._process, None
        if self._answers is not None:
            os.close(self._answers)
            self._answers = None
        if process is None:
            return
        assert process.stdin is not None and process.stdout is not None
        try:
            # An empty session asks it to end: the end of its input alone would not
            # come while a process the script forked still holds the pipe.
            _send(process.stdin, _BYTES, b"")
            process.stdin.close()
            status, payload = _receive(process.stdout)
            if status == _DONE:
                self.cpu_s = float(payload)
        except (OSError, ValueError, _Lost):
            pass
        _end(process)

    def _launch(self) -> subprocess.Popen[bytes] | None:
        # (Not a process of the script's for `--follow` to record.)
        environment = {k: v for k, v in os.environ.items() if k != FOLLOW_VARIABLE}
        answers = () if self._answers is None else (self._answers,)
        command = [sys.executable, "-m", __name__, str(self.trace_start_ns), *map(str, answers)]
        if not sys.executable:  # (an embedded interpreter that does not know its program)
            self.warnings.append(
                "the profiler sessions were read in the profiled process: this Python does "
                "not name its interpreter (sys.executable), so no reader process could start"
            )
            return None
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=environment,
                pass_fds=answers,
                start_new_session=True,  # the terminal's Ctrl-C is the script's to take
            )
        except OSError as error:
            self.warnings.append(
                f"the profiler sessions were read in the profiled process: a reader "
                f"process could not start ({error})"
            )
            return None
        for pipe in (process.stdin, process.stdout):
            _widen(pipe)
        return process

    @staticmethod
    def _exchange(
        process: subprocess.Popen[bytes], xspace: bytes | Path, answers: int | None
    ) -> Chunk:
        assert process.stdin is not None and process.stdout is not None
        kind, data = (_FILE, os.fsencode(xspace)) if isinstance(xspace, Path) else (_BYTES, xspace)
        try:
            _send(process.stdin, kind, data)
        except OSError as error:
            raise _Lost(f"it could not be written to ({error})") from None
        status, payload = _receive(process.stdout)
        if status == _UNREADABLE:
            raise WireError(payload.decode(errors="replace"))
        if status == _CHUNK_IN_FILE and answers is not None:
            (size,) = _LENGTH.unpack(payload)
            try:
                payload = os.pread(answers, size, 0)
            except OSError as error:
                raise _Lost(f"its answer could not be read ({error})") from None
        elif status != _CHUNK:
            raise _Lost(f"it answered {status}")
        try:
            return pickle.loads(payload)
        except Exception as error:  # (a payload cut short: any unpickling error)
            raise _Lost(f"its answer could not be read ({error})") from None

    def _lose(self, why: str) -> None:
        process, self._process = self._process, None
        assert process is not None
        code = _end(process)
        said = process.stderr.read().decode(errors="replace").strip() if process.stderr else ""
        last = said.splitlines()[-1] if said else f"exit status {code}"
        if self.read_elsewhere:
            self.warnings.append(
                f"the process reading the profiler sessions ended after "
                f"{self.read_elsewhere} of them ({why}: {last}); later sessions were read "
                "in the profiled process, where a buffer allocated before that and freed "
                "after it has its free unmatched"
            )
        else:
            self.warnings.append(
                f"the profiler sessions were read in the profiled process: the reader "
                f"process ended at once ({why}: {last})"
            )


def _answer_file() -> int | None:
    """A file in memory for the reader's answers (Linux; elsewhere, None)."""
    create = getattr(os, "memfd_create", None)
    if create is None:
        return None
    try:
        return create("tpumem-session-columns")  # (close-on-exec: pass_fds hands it over)
    except OSError:
        return None


def _widen(pipe: IO[bytes] | None) -> None:
    """Gives a pipe 1 MiB (Linux's most for a user, where the default is 64 kiB):
    a session's 3 MB then crosses in 4 writes rather than 50, each waking the
    other side."""
    if pipe is not None and hasattr(fcntl, "F_SETPIPE_SZ"):  # (Linux)
        with contextlib.suppress(OSError):  # (a user's pipe quota spent: the default)
            fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)


def _end(process: subprocess.Popen[bytes]) -> int | None:
    """Waits for a reader that was told to end (or lost), killing one that hangs."""
    try:
        return process.wait(timeout=_EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _read(xspace: bytes | Path) -> bytes:
    if isinstance(xspace, bytes):
        return xspace
    try:
        return xspace.read_bytes()
    except OSError as error:
        raise WireError(f"the session's file could not be read ({error})") from None


def _exact(source: IO[bytes], size: int) -> bytes:
    data = source.read(size)
    if len(data) != size:
        raise _Lost("its pipe ended")
    return data


def _receive(source: IO[bytes]) -> tuple[int, bytes]:
    status = _exact(source, 1)[0]
    (size,) = _LENGTH.unpack(_exact(source, _LENGTH.size))
    return status, _exact(source, size)


def _send(sink: IO[bytes], status: int, payload: bytes) -> None:
    sink.write(bytes([status]) + _LENGTH.pack(len(payload)))
    sink.write(payload)
    sink.flush()


def _write_at_start(descriptor: int, data: bytes) -> None:
    view, written = memoryview(data), 0
    while written < len(data):
        written += os.pwrite(descriptor, view[written:], written)


def main() -> None:
    """The reader process: sessions in on stdin, their chunks out on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):  # (no nice: runs as it is)
        os.nice(19)
    converter = ChunkConverter(int(sys.argv[1]))
    answers = int(sys.argv[2]) if len(sys.argv) > 2 else None
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    try:
        while True:
            kind, data = _receive(source)
            if not data:
                break
            try:
                chunk = converter.convert(_read(Path(os.fsdecode(data)) if kind == _FILE else data))
            except (DecodeError, WireError) as error:
                _send(sink, _UNREADABLE, str(error).encode())
            else:
                pickled = pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL)
                if answers is None:
                    _send(sink, _CHUNK, pickled)
                else:
                    _write_at_start(answers, pickled)
                    _send(sink, _CHUNK_IN_FILE, _LENGTH.pack(len(pickled)))
        times = os.times()
        _send(sink, _DONE, repr(times.user + times.system).encode())
    except (_Lost, BrokenPipeError):
        pass  # the profiled process ended first: what it had not taken is lost with it


if __name__ == "__main__":
    main()
