"""The pieces of `tpumem profile` that need no framework: profiler chunks on the
trace clock, recording how a killed run ended, finding the framework, and the
buffer books' packed rows."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import run_python
from tpumem.adapters import xla_dump
from tpumem.adapters.base import Sampler
from tpumem.adapters.book_rows import BookRows
from tpumem.adapters.call_stacks import CallStacks
from tpumem.adapters.profiler_chunks import ProfilerChunks
from tpumem.adapters.quiet import ANNOUNCEMENT
from tpumem.adapters.source_lines import SourceLines
from tpumem.adapters.xspace_chunks import ChunkConverter
from tpumem.analysis import analyze
from tpumem.analysis.device_events import capture_gaps
from tpumem.launch import oom_log
from tpumem.launch.stderr_filter import StderrFilter
from tpumem.report.rows import fact_rows
from tpumem.trace.amend import append_metadata
from tpumem.trace.columns import record_batch
from tpumem.trace.metadata import ExitStatus
from tpumem.trace.reader import load
from tpumem.trace.schema import ALLOC, FREE
from tpumem.trace.writer import TraceWriter
from xspace_builder import build_space

TRACE_START = 1_700_000_000_000_000_000


def memory_event(name: str, offset_ns: int, address: int, size: int, in_use: int) -> dict:
    return {
        "name": name,
        "offset_ps": offset_ns * 1000,
        "stats": {
            "allocator_name": ("ref", "GPU_0_bfc"),
            "addr": address,
            "allocation_bytes": size,
            "bytes_allocated": in_use,
            "peak_bytes_in_use": in_use,
        },
    }


def test_chunks_share_the_trace_clock_and_pair_across_sessions():
    """Buffer a lives across the two sessions, b only in the second; the session
    starts are 1 ms and 3 ms after the trace's, and line timestamps are 1 µs."""
    first = build_space(
        [memory_event("MemoryAllocation", 10, 0x1000, 256, 256)],
        session=(TRACE_START + 1_000_000, TRACE_START + 2_000_000),
    )
    second = build_space(
        [
            memory_event("MemoryAllocation", 20, 0x2000, 512, 768),
            memory_event("MemoryDeallocation", 30, 0x1000, 256, 512),
            memory_event("MemoryDeallocation", 40, 0x2000, 512, 0),
        ],
        session=(TRACE_START + 3_000_000, TRACE_START + 4_000_000),
    )
    converter = ChunkConverter(TRACE_START)
    one, two = converter.convert(first), converter.convert(second)
    assert one.event_count == 1 and two.event_count == 3
    assert one.events["time_ns"].tolist() == [1_000_000 + 1_000 + 10]
    assert two.events["time_ns"].tolist() == [3_001_020, 3_001_030, 3_001_040]
    (a,) = one.events["buffer_id"].tolist()
    b_alloc, a_free, b_free = two.events["buffer_id"].tolist()
    assert a_free == a and b_alloc == b_free and b_alloc != a
    assert (one.start_ns, one.stop_ns, two.start_ns) == (1_000_000, 2_000_000, 3_000_000)
    assert converter.open_buffers == 0


def _sessions_of_two_buffers() -> list[bytes]:
    """Three sessions: a lives across the first two, b within the third."""
    events = [
        [memory_event("MemoryAllocation", 10, 0x1000, 256, 256)],
        [memory_event("MemoryDeallocation", 20, 0x1000, 256, 0)],
        [
            memory_event("MemoryAllocation", 30, 0x2000, 512, 512),
            memory_event("MemoryDeallocation", 40, 0x2000, 512, 0),
        ],
    ]
    return [
        build_space(chunk, session=(TRACE_START + 2 * i * 10**6, TRACE_START + (2 * i + 1) * 10**6))
        for i, chunk in enumerate(events)
    ]


def _rows(chunk) -> list[tuple]:  # type: ignore[no-untyped-def]
    """A chunk's (time, buffer id) per event, -1 for no id."""
    times = chunk.events["time_ns"].tolist()
    return list(zip(times, np.ma.filled(chunk.events["buffer_id"], -1).tolist(), strict=True))


@pytest.mark.parametrize("answers", ["in a memory file", "on the pipe"])
@pytest.mark.parametrize("given", ["bytes", "files"])
def test_a_reader_process_reads_sessions_as_this_process_would(
    tmp_path, monkeypatch, answers, given
):
    """Frees pair with allocations of earlier sessions in the reader process, the
    sessions handed over as bytes or as files and the columns coming back through
    a memory file (Linux) or the pipe (elsewhere); bytes that are no XSpace and a
    file that is gone raise here and the reader goes on; closing it gives its CPU."""
    from tpumem.adapters import session_reader
    from tpumem.xplane.wire import WireError

    if answers == "on the pipe":
        monkeypatch.setattr(session_reader, "_answer_file", lambda: None)
    sessions = _sessions_of_two_buffers()
    handed: list[bytes | Path] = list(sessions)
    if given == "files":
        handed = [tmp_path / f"{i}.xplane.pb" for i in range(len(sessions))]
        for path, data in zip(handed, sessions, strict=True):
            path.write_bytes(data)
    reader, local = session_reader.SessionReader(TRACE_START), ChunkConverter(TRACE_START)
    assert not reader.in_process
    assert (reader._answers is None) == (answers == "on the pipe")
    first = reader.convert(handed[0])
    with pytest.raises(WireError):
        reader.convert(b"\x0a\xff not an XSpace")
    with pytest.raises(WireError, match="the session's file could not be read"):
        reader.convert(tmp_path / "gone.xplane.pb")
    chunks = [first, *(reader.convert(s) for s in handed[1:])]
    assert [_rows(c) for c in chunks] == [_rows(local.convert(s)) for s in sessions]
    assert _rows(chunks[1])[0][1] == _rows(chunks[0])[0][1] >= 0  # paired across sessions
    reader.close()
    assert reader.read_elsewhere == 3 and reader.cpu_s is not None and reader.cpu_s > 0
    assert reader.warnings == []


def test_a_reader_process_that_dies_leaves_the_rest_to_this_process(tmp_path):
    """Killed after the first session: the session in hand and the later ones
    (one of them a file) are read here, nothing is lost, and the warning says
    which frees lost their pair."""
    import signal

    from tpumem.adapters.session_reader import SessionReader

    sessions = _sessions_of_two_buffers()
    reader = SessionReader(TRACE_START)
    first = reader.convert(sessions[0])
    reader._process.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    reader._process.wait()  # type: ignore[union-attr]
    (tmp_path / "third.xplane.pb").write_bytes(sessions[2])
    second, third = reader.convert(sessions[1]), reader.convert(tmp_path / "third.xplane.pb")
    assert reader.in_process and first.event_count == 1
    assert _rows(second)[0][1] == -1  # a's allocation was the dead reader's to pair
    b_alloc, b_free = _rows(third)
    assert b_alloc[1] == b_free[1] >= 0
    (warning,) = reader.warnings
    assert "ended after 1 of them" in warning and "freed after it has its free unmatched" in warning
    reader.close()


class LateStampingSessions:
    """Sessions that stamp their stop time well after their stop was called, as
    TensorFlow's profiler does on a loaded machine (it stamps the stop once it
    has gathered the events, while its tracer stopped when asked)."""

    LATE_NS = 300_000_000

    def __init__(self) -> None:
        self.spans: list[list[int]] = []  # [opened, stop called] per session

    def open(self) -> int:
        self.spans.append([time.time_ns(), 0])
        return len(self.spans) - 1

    def collect(self, session: int) -> bytes:
        span = self.spans[session]
        span[1] = time.time_ns()
        time.sleep(0.02)  # handing the events over
        return build_space([], session=(span[0], span[1] + self.LATE_NS))

    def busy(self) -> bool | None:
        return None


class FileSessions:
    """Sessions that hand over their XSpace as a file, as TensorFlow's do."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files: list[Path] = []

    def open(self) -> int:
        return len(self.files)

    def collect(self, session: int) -> Path:
        events = [memory_event("MemoryAllocation", 10, 0x1000 * (session + 1), 256, 256)]
        file = self.folder / f"{session}.xplane.pb"
        file.write_bytes(build_space(events, session=(time.time_ns(), time.time_ns())))
        self.files.append(file)
        return file

    def busy(self) -> bool | None:
        return None


def test_sessions_handed_over_as_files_are_read_and_deleted(tmp_path):
    sessions = FileSessions(tmp_path)
    with TraceWriter(tmp_path / "t.tpumem", {"framework": "test"}) as writer:
        chunks = ProfilerChunks(writer, sessions, chunk_s=0.05)
        chunks.start()
        time.sleep(0.3)
        chunks.stop()
    assert len(sessions.files) >= 3 and not any(f.exists() for f in sessions.files)
    trace = load(tmp_path / "t.tpumem")
    assert trace.numbers("bytes")[trace.valid("buffer_id")].sum() == 256 * len(sessions.files)
    assert chunks.warnings == []


def test_capture_gaps_come_from_what_the_sessions_recorded(tmp_path):
    """Every stretch between a session's stop and the next one's start is a
    marked gap, whatever stop time the profiler stamped; the covered figure is
    the sessions' own spans."""
    sessions = LateStampingSessions()
    with TraceWriter(tmp_path / "t.tpumem", {"framework": "test"}) as writer:
        chunks = ProfilerChunks(writer, sessions, chunk_s=0.1)
        chunks.start()
        time.sleep(0.55)
        chunks.stop()
        origin = writer.start_time_ns
    trace = load(tmp_path / "t.tpumem")
    gaps = capture_gaps(trace)
    assert len(sessions.spans) >= 4 and len(gaps) == len(sessions.spans) - 1
    for (start, end), (_, stop_called), (next_opened, _) in zip(
        gaps, sessions.spans, sessions.spans[1:], strict=False
    ):
        # Measured around the calls: the gap holds the whole hand-over.
        assert start <= stop_called - origin and end >= next_opened - origin
        assert end - start < LateStampingSessions.LATE_NS
    capture = trace.metadata.capture
    covered = sum(stop - opened for opened, stop in sessions.spans)
    # Stopping is timed as tpumem asks, a moment before the session's own stop runs.
    assert covered - 50_000_000 * len(sessions.spans) < capture.covered_ns <= covered
    assert capture.chunks == len(sessions.spans) and capture.sessions_overrun == 0


def test_the_capture_row_says_when_sessions_ran_long(make_trace):
    capture = {"chunks": 1, "chunk_s": 1.0, "gaps": 0, "sessions_overrun": 0}
    long = {**capture, "chunks": 4, "sessions_overrun": 2, "longest_session_ns": 17_700_000_000}
    rows = [{"kind": "alloc", "time_ns": 1, "device": "CPU:0", "buffer_id": 1, "bytes": 8}]
    once = dict(fact_rows(analyze(load(make_trace(rows, {"capture": capture}, "a.tpumem")))))
    assert once["Capture"] == "1 profiler session of 1 s"
    text = dict(fact_rows(analyze(load(make_trace(rows, {"capture": long}, "b.tpumem")))))
    assert text["Capture"].startswith("4 profiler sessions of 1 s; 2 sessions ran long")
    assert "17.700 s" in text["Capture"]


def test_a_free_of_a_buffer_the_chunks_never_saw_stays_unpaired():
    space = build_space(
        [memory_event("MemoryDeallocation", 5, 0x3000, 256, 0)], session=(TRACE_START, TRACE_START)
    )
    chunk = ChunkConverter(TRACE_START).convert(space)
    assert np.ma.getmaskarray(chunk.events["buffer_id"]).tolist() == [True]


def _trace_with_rows(path: Path, rows: int) -> bytes:
    with TraceWriter(path, {"framework": "test"}, flush_interval_s=0) as writer:
        for index in range(rows):
            writer.alloc(device="CPU:0", bytes=256, buffer_id=index)
            if index % 10 == 9:
                writer.flush()
    return path.read_bytes()


@pytest.mark.parametrize("cut", [8, 100, 2000])
def test_a_killed_runs_ending_is_recorded_without_losing_whole_batches(tmp_path, cut):
    """The file is cut `cut` bytes before its end, as a SIGKILL might leave it."""
    path = tmp_path / "t.tpumem"
    data = _trace_with_rows(path, 50)
    path.write_bytes(data[:-cut])
    rows_before = len(load(path))
    assert append_metadata(path, 7, exit=ExitStatus(signal=9, signal_name="SIGKILL"))
    trace = load(path)
    assert trace.metadata.exit.signal == 9
    assert trace.numbers("bytes")[trace.valid("buffer_id")].sum() == 256 * (rows_before)
    assert len(trace) == rows_before + 1


def test_a_trace_cut_inside_its_header_is_left_alone(tmp_path):
    path = tmp_path / "t.tpumem"
    data = _trace_with_rows(path, 3)
    path.write_bytes(data[:40])
    assert not append_metadata(path, exit=ExitStatus(code=1))
    assert path.read_bytes() == data[:40]


def test_source_lines_skip_a_library_checked_out_on_the_path(tmp_path, monkeypatch):
    """A framework or library on PYTHONPATH (a checkout, not site-packages) is not
    the user's code: the source is the user's line that called into it."""
    package = tmp_path / "checkout" / "flax" / "linen"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "module.py").write_text(
        "import sys\ndef apply(lines):\n    return lines(sys._getframe())\n"
    )
    (tmp_path / "train.py").write_text(
        "from flax.linen import module\ndef step(lines):\n    return module.apply(lines)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "checkout"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import train

    assert train.step(SourceLines()) == "train.py:3"


def test_source_lines_skip_any_library_on_the_path_not_only_known_ones(tmp_path, monkeypatch):
    """A library of any name checked out beside the project and put on
    PYTHONPATH is not the user's code; the user's own modules beside the script
    (and a path entry above the project) are."""
    library = tmp_path / "libs" / "trainkit"
    library.mkdir(parents=True)
    (library / "__init__.py").write_text(
        "import sys\ndef apply(lines):\n    return lines(sys._getframe())\n"
    )
    project = tmp_path / "project"
    project.mkdir()
    (project / "helpers.py").write_text(
        "import trainkit\ndef step(lines):\n    return trainkit.apply(lines)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "libs"))
    monkeypatch.syspath_prepend(str(tmp_path))  # above the project: holds it
    monkeypatch.syspath_prepend(str(project))
    monkeypatch.chdir(project)
    import helpers

    assert helpers.step(SourceLines()) == "helpers.py:3"


def test_stacks_name_code_that_was_made_and_dropped_while_the_run_went_on(tmp_path, monkeypatch):
    """Stacks know a frame's code by its id: a code object walked once and then
    dropped must not lend its name and file to a later one at the same address."""
    monkeypatch.chdir(tmp_path)
    with TraceWriter(tmp_path / "t.tpumem", {"framework": "test"}) as writer:
        stacks = CallStacks(writer)
        for number in range(200):
            # A function of its own each time (a notebook cell run again, a
            # generated step): a new code object, the last one freed.
            source = f"import sys\ndef step_{number}(stacks):\n    return stacks(sys._getframe())\n"
            (tmp_path / f"cell_{number % 2}.py").write_text(source)
            namespace: dict = {}
            exec(compile(source, str(tmp_path / f"cell_{number % 2}.py"), "exec"), namespace)
            source_line, stack_id = namespace[f"step_{number}"](stacks)
            del namespace
            assert source_line == f"cell_{number % 2}.py:3"
            assert stacks.frames(stack_id)[-1] == (f"cell_{number % 2}.py", 3, f"step_{number}")


def test_a_stacks_lines_are_the_frames_own_lines_in_a_long_function(monkeypatch, tmp_path):
    """Frames are keyed by their instruction's offset and their lines found when a
    stack is first seen: each call site of a 300-line function keeps its own line,
    the same line reached twice is one stack, and an outer frame's line is where
    it called in."""
    monkeypatch.chdir(tmp_path)
    body = "".join(f"    x{i} = {i}\n" for i in range(300))
    source = (
        "import sys\n"
        "def inner(stacks):\n    return stacks(sys._getframe()), sys._getframe().f_back.f_lineno\n"
        f"def long(stacks):\n    found = [inner(stacks)]\n{body}"
        "    found.append(inner(stacks))\n"
        "    for _ in range(2):\n        found.append(inner(stacks))\n"
        "    return found\n"
    )
    (tmp_path / "script.py").write_text(source)
    namespace: dict = {}
    exec(compile(source, str(tmp_path / "script.py"), "exec"), namespace)
    with TraceWriter(tmp_path / "t.tpumem", {"framework": "test"}) as writer:
        stacks = CallStacks(writer)
        found = namespace["long"](stacks)
    lines = [line for _, line in found]
    assert lines == [5, 306, 308, 308]
    for (where, line), _ in zip(found, lines, strict=True):
        source_line, stack_id = where
        assert source_line == "script.py:3"
        outer, innermost = stacks.frames(stack_id)[-2:]
        assert (outer, innermost) == (("script.py", line, "long"), ("script.py", 3, "inner"))
    assert found[2][0] == found[3][0] and found[0][0] != found[1][0] != found[2][0]


CAPTURED_STACKS = """
import json, sys
import torch
from tpumem.adapters.call_stacks import CallStacks
from tpumem.adapters.torch_xla.op_stacks import TorchStacks
from tpumem.trace.writer import TraceWriter

class Block:
    def forward(self, stacks, op_stacks):
        return stacks(sys._getframe()), op_stacks.capture()

def run(stacks, op_stacks):
    return [Block().forward(stacks, op_stacks) for _ in range(2)]

with TraceWriter("t.tpumem", {"framework": "test"}) as writer:
    stacks = CallStacks(writer)
    op_stacks = TorchStacks(stacks)
    found = run(stacks, op_stacks)
    walked = [where for where, _ in found]
    places = op_stacks.places([captured for _, captured in found] + [walked[0]])
print(json.dumps({"walked": walked, "places": places, "frames": stacks.frames(walked[0][1])}))
"""


def test_a_stack_pytorch_captures_is_the_stack_a_walk_finds(tmp_path):
    """The PyTorch/XLA op hook keeps PyTorch's own capture of the stack and names
    it only when the book enters the tensor: the same frames, lines and
    qualified names (`Block.forward`, not the code's `forward`) as a walk, and the
    same interned stack."""
    found = run_python(CAPTURED_STACKS, tmp_path)
    walked = [tuple(where) for where in found["walked"]]
    assert walked[0] == walked[1] and walked[0][0] == "script.py:10"
    assert [tuple(where) for where in found["places"]] == [walked[0], walked[0], walked[0]]
    assert [tuple(frame) for frame in found["frames"]] == [
        ("script.py", 18, "<module>"),
        ("script.py", 13, "run"),
        ("script.py", 13, "run.<locals>.<listcomp>"),
        ("script.py", 10, "Block.forward"),
    ]


def test_tpumems_own_xla_dump_is_written_to_memory_where_the_machine_has_it(monkeypatch, tmp_path):
    """XLA:CPU writes hundreds of files a compilation into a dump: on a disk that
    slowed a compilation by half a second."""
    made = xla_dump.dump_directory()
    os.rmdir(made)
    in_memory = os.access(xla_dump.MEMORY_FILESYSTEM, os.W_OK | os.X_OK)
    assert (Path(made).parent == Path(xla_dump.MEMORY_FILESYSTEM)) == in_memory
    monkeypatch.setattr(xla_dump, "MEMORY_FILESYSTEM", str(tmp_path / "none"))
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(xla_dump.tempfile, "tempdir", None)
    made = xla_dump.dump_directory()
    assert Path(made).parent == tmp_path and Path(made).name.startswith("tpumem-xla-")


def test_flags_a_script_set_after_tpumem_get_tpumem_s_dump_back_and_keep_their_own():
    environ = {"XLA_FLAGS": "--xla_cpu_enable_fast_math=false"}  # (the script replaced them)
    theirs = xla_dump.keep_dump_flags(environ, "/dump")
    assert theirs == "--xla_cpu_enable_fast_math=false"
    assert environ["XLA_FLAGS"] == (
        "--xla_cpu_enable_fast_math=false --xla_dump_to=/dump --xla_dump_hlo_as_proto"
    )
    assert xla_dump.keep_dump_flags(environ, "/dump") is None  # (there already)
    # A dump of the script's own stays as it asked; fit, which never runs it, reads its own.
    own = {"XLA_FLAGS": "--xla_dump_to=/theirs"}
    assert xla_dump.keep_dump_flags(own, "/dump") is None
    assert own == {"XLA_FLAGS": "--xla_dump_to=/theirs"}
    assert xla_dump.keep_dump_flags(own, "/dump", over_theirs=True) == "--xla_dump_to=/theirs"
    assert own["XLA_FLAGS"].endswith("--xla_dump_to=/dump --xla_dump_hlo_as_proto")


def test_stderr_loses_only_what_tpumem_threads_logged():
    read_end, write_end = os.pipe()
    stderr = StderrFilter(destination=write_end)
    child = os.dup(stderr.child_fd)
    stderr.start()
    ours = b"I0000 00:00:1795431052.742385   13753 profiler_session.cc:81] Profiler session"
    theirs = b"I0000 00:00:1795431052.742385   20000 profiler_session.cc:81] Profiler session"
    for chunk in (
        b"the script's line\n" + ANNOUNCEMENT + b"13753\n",
        ours[:30],  # a log line arriving in pieces
        ours[30:] + b" collecting data.\n" + theirs + b" started.\n",
        b"W1123 10:43:57.349421   13753 bfc.cc:1] warning on our thread\n",
        b"progress 50%\r",  # no newline: passed on without waiting for one
    ):
        os.write(child, chunk)
    os.close(child)
    stderr.finish()
    os.close(write_end)
    with os.fdopen(read_end, "rb") as passed:
        text = passed.read()
    assert text == b"the script's line\n" + theirs + b" started.\nprogress 50%\r"
    assert stderr.dropped == 2


def _through_filter(destination: int, chunks: list[bytes]) -> StderrFilter:
    stderr = StderrFilter(destination=destination)
    child = os.dup(stderr.child_fd)
    stderr.start()
    for chunk in chunks:
        os.write(child, chunk)
    os.close(child)
    stderr.finish()
    return stderr


_DUMP = (Path(__file__).parent.parent / "data" / "bfc_oom_dump.txt").read_bytes()
_BEFORE = b"the script's own line\n"
_AMID = b"Epoch 1/3 from the script's other thread\n"
_AFTER = b"W0000 00:00:1795461209.648200   30831 op_kernel.cc:1857] OP_REQUIRES failed\n"


def _read_terminal(reader: int) -> list[str]:
    shown = b""
    while True:
        try:
            data = os.read(reader, 65536)
        except OSError:  # (the terminal's other end closed)
            break
        if not data:
            break
        shown += data
    os.close(reader)
    return shown.replace(b"\r\n", b"\n").decode().splitlines()


def _on_a_terminal(chunks: list[bytes]) -> tuple[list[str], StderrFilter]:
    reader, terminal = os.openpty()
    stderr = _through_filter(terminal, chunks)
    os.close(terminal)
    return _read_terminal(reader), stderr


def _line(text: bytes) -> str:
    return text.decode().rstrip("\n")


def test_on_a_terminal_an_allocators_dump_is_its_first_line_and_a_count_of_the_rest():
    """TensorFlow's 51-line account of a failed allocation, with a line of the
    script's own in the middle of it: a terminal shows the account's first line,
    the script's line, and one line for the rest; the trace keeps its figures."""
    lines = _DUMP.splitlines(keepends=True)
    shown, stderr = _on_a_terminal([_BEFORE, *lines[:20], _AMID, *lines[20:], _AFTER])
    assert shown[:3] == [_line(_BEFORE), _line(lines[0]), _line(_AMID)]
    assert shown[3].startswith("tpumem: the allocator's account of it went on for 50 more lines")
    assert shown[4:] == [_line(_AFTER)]
    (log,) = stderr.oom_logs.finish()
    assert log.lines == len(lines)
    assert log.chunks_in_use_bytes == 21 * 1024 * 1024 + 256 and "Limit:" in log.text


def test_written_to_a_file_stderr_keeps_an_allocators_dump_line_for_line(tmp_path):
    lines = _DUMP.splitlines(keepends=True)
    path = tmp_path / "stderr.log"
    with path.open("wb") as file:
        stderr = _through_filter(file.fileno(), [_BEFORE, *lines[:20], _AMID, *lines[20:]])
    assert path.read_bytes() == _BEFORE + b"".join(lines[:20]) + _AMID + b"".join(lines[20:])
    (log,) = stderr.oom_logs.finish()
    assert log.lines == len(lines)


def test_a_dump_cut_short_by_the_process_ending_still_says_what_went():
    lines = _DUMP.splitlines(keepends=True)
    shown, _ = _on_a_terminal([*lines[:10], b"a line the kill cut"])
    assert shown[0] == _line(lines[0])
    assert shown[1].startswith("tpumem: the allocator's account of it went on for 9 more lines")
    assert shown[2:] == ["a line the kill cut"]


_HEAD_ALONE = [  # TF_CPP_MIN_LOG_LEVEL=1: the warning's lines, no INFO dump, no stats
    b"W0000 00:00:1795461209.647896   30831 bfc_allocator.cc:502] Allocator (mklcpu) ran "
    b"out of memory trying to allocate 13.00MiB (rounded to 13631488)requested by op Fill\n",
    b"If the cause is memory fragmentation maybe the environment variable "
    b"'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation. \n",
    b"Current allocation summary follows.\n",
    b"W0000 00:00:1795461209.648200   30831 bfc_allocator.cc:513] ****____xxxx**\n",
]


def test_a_log_without_its_dump_ends_at_the_occupancy_line():
    """Its INFO lines unprinted, the log has neither dump nor stats: it ends at
    the occupancy line, and what the allocator logs after is passed on."""
    later = b"I0000 00:00:1795461219.1   30831 bfc_allocator.cc:300] a later line\n"
    shown, stderr = _on_a_terminal([*_HEAD_ALONE, _AFTER, later, b"progress 5%\r"])
    assert shown[0] == _line(_HEAD_ALONE[0])
    assert shown[1].startswith("tpumem: the allocator's account of it went on for 3 more lines")
    assert shown[2:] == [_line(_AFTER), _line(later), "progress 5%"]  # (passed on unheld)
    (log,) = stderr.oom_logs.finish()
    assert log.lines == 4


def test_a_log_left_open_ends_by_itself(monkeypatch):
    """A log whose end never comes (cut, or an allocator that prints no
    occupancy) stops holding the allocator's lines after OPEN_S."""
    monkeypatch.setattr(oom_log, "OPEN_S", 0.0)
    reader = oom_log.OomLogReader()
    assert reader.feed(_HEAD_ALONE[0].rstrip(b"\n")) is oom_log.Part.HEAD
    time.sleep(0.01)
    assert not reader.dump_open
    assert reader.feed(b"I0 00:00:1.0   1 bfc_allocator.cc:1] Bin (256): ...") is None
    assert len(reader.finish()) == 1


def test_an_allocation_that_is_not_a_failure_begins_no_log():
    reader = oom_log.OomLogReader()
    warning = (
        b"W0000 00:00:1.0   1 bfc_allocator.cc:290] Allocator (GPU_0_bfc) ran out of memory "
        b"trying to allocate 2.00GiB with freed_by_count=0. The caller indicates that this is "
        b"not a failure, but this may mean that there could be performance gains"
    )
    assert reader.feed(warning) is None
    assert reader.finish() == []


def test_tensorflow_allocations_take_the_stack_of_the_call_they_fell_in():
    """Rows inside an eager op's window get its stack and line; a row a host copy
    labelled first keeps its labels; frees and rows outside every window get none."""
    import pyarrow as pa

    from tpumem.adapters.tensorflow.allocator_stacks import TfStacks

    stacks = TfStacks(None, 0)  # type: ignore[arg-type]  (eager windows need no frames)
    stacks._windows.extend([(0, 100, ("a.py:1", 7), None), (200, 300, ("b.py:2", 8), None)])
    columns = {
        "kind": pa.DictionaryArray.from_arrays(pa.array([0, 0, 1, 0, 0, 0]), [ALLOC, FREE]),
        "time_ns": np.array([50, 60, 70, 250, 260, 400]),
        "op": pa.array(["MatMul", "convert", "MatMul", "Add", "MatMul", "Add"]),
        "stack": pa.array([None, 99, None, None, None, None], pa.int64()),
        "source": pa.array([None, "host.py:5", None, None, None, None]),
    }
    labelled = stacks.label(columns)
    assert labelled["stack"].to_pylist() == [7, 99, None, 8, 8, None]
    assert labelled["source"].to_pylist() == ["a.py:1", "host.py:5", None, "b.py:2", "b.py:2", None]
    assert stacks.labelled == 4


def test_a_books_packed_rows_read_back_as_the_rows_it_made():
    """Every field of an allocation and a free, missing ones null (a temp's
    address and labels, a free's labels), through batches that name different
    devices and labels: each batch's dictionaries hold only what it uses."""
    rows = BookRows()
    made = [
        (ALLOC, 10, "CPU:0", 0, 4096, 64, 60, "add", "output", "float32", "[15]", "x.py:3", 2),
        (ALLOC, 11, "TPU:1", 1, None, 128, 128, "jit(f)", "temp", None, None, None, None),
        (FREE, 12, "CPU:0", 0, 4096, 64, None, None, None, None, None, None, None),
        (ALLOC, 13, "CPU:0", 2, 8192, 8, None, None, "array", "int8", "[8]", "y.py:1", None),
    ]
    later = [
        (FREE, 14, "TPU:1", 1, None, 128, None, None, None, None, None, None, None),
        (ALLOC, 15, "CPU:1", 3, 1 << 40, 4, 4, "mul", "output", "int32", "[]", "y.py:9", 0),
    ]
    fields = ("kind", "time_ns", "device", "buffer_id", "address", "bytes", "requested_bytes")
    fields += ("op", "region", "dtype", "shape", "source", "stack")
    for batch in (made, later, []):
        for kind, time_ns, device, buffer_id, address, size, requested, *label in batch:
            if kind == ALLOC:
                *named, source, stack = label
                where = (source, stack)
                rows.alloc(time_ns, device, buffer_id, address, size, requested, (*named, where))
            else:
                rows.free(time_ns, device, buffer_id, address, size)
        columns, count = rows.columns(rows.take())
        assert count == len(batch)
        if not batch:
            assert columns == {}
            continue
        read = record_batch(columns, count)
        assert [tuple(row[f] for f in fields) for row in read.to_pylist()] == batch
        used = {row[2] for row in batch}
        assert set(read.column("device").dictionary.to_pylist()) == used


def test_a_tensor_torch_xla_cannot_tell_about_counts_as_pending():
    """torch_xla's check of which tensors wait for a graph fails for the whole list
    on a tensor between states on another device's thread (no data and no IR: a
    torch_xla.launch worker died of it in CI). The book's look must not fail the
    program's op: that tensor counts as pending, the others keep their answers."""
    from tpumem.adapters.torch_xla.tensor_book import TensorBook

    class Between:
        pass

    class Xlac:
        @staticmethod
        def _check_tensor_need_materialization(tensors: list) -> list[bool]:
            if any(isinstance(tensor, Between) for tensor in tensors):
                raise RuntimeError(
                    "Check failed: false: _check_tensor_need_materialization currently "
                    "does not handle XLATensor without XLAData and IR"
                )
            return [tensor == "pending" for tensor in tensors]

    book = TensorBook(0, Xlac(), None, False, lambda wheres: [])
    assert book.pending_flags(["ready", Between(), "pending"]) == [False, True, True]
    assert book.pending_flags(["ready", "pending"]) == [False, True]
    assert book.pending_flags([]) == []


def test_a_samplers_tick_can_put_off_the_next_one():
    """A tick that returns seconds (TensorFlow's, while a session records every
    allocation) is not run again before they pass; one that returns None runs
    every interval."""
    times: dict[str, list[float]] = {"later": [], "every": []}

    def tick(name: str, wait: float | None) -> float | None:
        times[name].append(time.monotonic())
        return wait

    samplers = [
        Sampler("later", 0.01, lambda: tick("later", 0.2)),
        Sampler("every", 0.01, lambda: tick("every", None)),
    ]
    for sampler in samplers:
        sampler.start()
    time.sleep(0.6)
    for sampler in samplers:
        sampler.stop()
    assert len(times["later"]) >= 2 and min(np.diff(times["later"])) >= 0.19
    assert len(times["every"]) > 2 * len(times["later"])


def test_a_tick_that_fails_does_not_stop_the_sampler():
    """A sampler whose tick raised went on ticking (before, its thread died: no
    more samples, no watch for Keras' steps, a traceback in the script's stderr),
    and says so once."""
    ticks: list[int] = []

    def tick() -> None:
        ticks.append(len(ticks))
        if len(ticks) in (2, 3):
            raise RuntimeError("a framework call failed under load")

    sampler = Sampler("failing", 0.005, tick)
    sampler.start()
    deadline = time.monotonic() + 30
    while len(ticks) < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    assert len(ticks) >= 6
    assert sampler.warnings() == [
        "tpumem's sampler failed at least once (RuntimeError: a framework call failed "
        "under load); it went on"
    ]


def test_keras_half_imported_is_hooked_at_a_later_tick(tmp_path, monkeypatch):
    """The sampler's thread can see Keras' callbacks module in sys.modules while the
    script's thread still runs its body (no CallbackList yet): the watch waits for
    the class and hooks it at a later tick, so fit's batches are still steps."""
    import sys
    import types

    from tpumem.adapters.base import Patches
    from tpumem.adapters.keras_steps import KERAS_CALLBACKS, KerasSteps
    from tpumem.trace.writer import TraceWriter

    half = types.ModuleType(KERAS_CALLBACKS)
    monkeypatch.setitem(sys.modules, KERAS_CALLBACKS, half)
    patches = Patches()
    with TraceWriter(tmp_path / "k.tpumem", {"framework": "tensorflow"}) as writer:
        steps = KerasSteps(writer, patches)
        steps.watch()  # the module's body has not made the class yet
        assert not steps.hooked

        class CallbackList:
            def on_train_batch_begin(self, batch, logs=None):
                return batch

        half.CallbackList = CallbackList
        steps.watch()
        assert steps.hooked
        assert [CallbackList().on_train_batch_begin(b) for b in range(3)] == [0, 1, 2]
    patches.undo()
    assert "on_train_batch_begin" in vars(CallbackList)  # put back as it was
    marks = load(tmp_path / "k.tpumem").numbers("step")
    assert sorted(int(m) for m in marks[~np.isnan(marks.astype(float))]) == [0, 1, 2]
