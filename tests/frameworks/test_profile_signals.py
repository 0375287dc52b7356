"""Signals, concurrent runs and orphans during `tpumem profile` (issue 47, part B):
whatever ends a run, its trace loads and says how; a signal sent to tpumem reaches
the script once; a run reports only its own trace; a trace still being written is
said to be, and neither replaced nor added to; no process of a followed tree
outlives tpumem; a forked child that runs another program is no rank.

Each run is a real `tpumem profile` in a process of its own. The moment a signal
is sent is set by files the scripts write and wait for, not by a sleep (the Ctrl-C
test alone waits, for a second SIGINT that must not come)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import assert_one_line_error, run_tpumem
from profiling import QUIET, InATerminal, profile
from tpumem.trace.reader import load

DATA = Path(__file__).parent.parent / "data" / "gpu"

WAIT_S = 120  # how long a test waits for a file a script writes, before it fails


def _start(cwd: Path, *args: str, env: dict | None = None, **popen) -> subprocess.Popen:
    """`tpumem profile ARGS`, running; stopping signals as a shell gives them
    (a suite run under nohup, or in the background, has them ignored)."""

    def default_signals() -> None:
        for number in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
            signal.signal(number, signal.SIG_DFL)

    options = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "text": True, **popen}
    return subprocess.Popen(
        [sys.executable, "-m", "tpumem", "profile", *args],
        cwd=cwd,
        env={**os.environ, **QUIET, **(env or {})},
        preexec_fn=default_signals,
        **options,
    )


def _wait_for(path: Path, run: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        assert run is None or run.poll() is None, run.stderr.read() if run.stderr else ""
        assert time.monotonic() < deadline, f"{path.name} never came"
        time.sleep(0.05)


def _finish(run: subprocess.Popen) -> str:
    _, stderr = run.communicate(timeout=WAIT_S)
    return stderr or ""


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status


# The writer's first import (pyarrow) made to wait in the profiled process: a
# signal then lands after the script began to import its framework and before
# the trace's header is on disk (the window was half a second wide, unaided).
# Only the first: the import tpumem tries again to record how the run ended
# (after a Ctrl-C, which interrupts the first) goes as it would.
SLOW_WRITER = textwrap.dedent(
    """
    import os, sys, time
    class SlowArrow:
        def find_spec(self, name, path=None, target=None):
            script = getattr(sys.modules.get("__main__"), "__file__", None) or ""
            first = not os.path.exists("loading-the-writer")
            if name == "pyarrow" and script.endswith("imports.py") and first:
                open("loading-the-writer", "w").close()
                time.sleep(60)
            return None
    sys.meta_path.insert(0, SlowArrow())
    """
)


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_run_stopped_before_its_header_was_written_leaves_a_trace_that_says_how(tmp_path, how):
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_WRITER)
    (tmp_path / "imports.py").write_text("import jax\n")
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    run = _start(tmp_path, "-o", "t.tpumem", "imports.py", env={"PYTHONPATH": path})
    _wait_for(tmp_path / "loading-the-writer", run)
    run.send_signal(how)
    stderr = _finish(run)
    assert run.returncode == 128 + how, stderr
    trace = load(tmp_path / "t.tpumem")  # the header, written by tpumem profile
    assert trace.metadata.framework == "jax"
    assert trace.metadata.exit.signal == how
    assert any("nothing was recorded" in warning for warning in trace.metadata.warnings)
    assert f"Ended {'interrupted' if how == signal.SIGINT else 'killed by'}" in " ".join(
        stderr.split()
    )


def _kill_tpumem(run: subprocess.Popen, profiled: int) -> None:
    """Kills tpumem (SIGKILL) and waits for the process it profiled to end of
    itself; one left (the test failing) is killed."""
    run.kill()
    _finish(run)
    try:
        assert _gone_within(profiled)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(profiled, signal.SIGKILL)


def _gone_within(pid: int, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _gone(pid)


# The writer's first import held back, as in SLOW_WRITER; the profiled process's
# pid in the file it writes then.
SLOW_WRITER_PID = SLOW_WRITER.replace(
    'open("loading-the-writer", "w").close()',
    'open("loading-the-writer", "w").write(str(__import__("os").getpid()))',
)


@pytest.mark.parametrize("when", ["before-the-import", "before-the-header"])
def test_tpumem_killed_before_the_header_leaves_no_empty_trace(tmp_path, when):
    """tpumem killed (SIGKILL) while the trace it created is empty: before the
    script imports its framework, or as the import began (it left an empty file,
    3 of 12 times, which `report` refuses). The profiled process ends (Linux's
    parent-death signal) and removes the empty trace, which nobody else can."""
    env = None
    if when == "before-the-import":
        (tmp_path / "imports.py").write_text(
            "import os, time\nopen('loading-the-writer', 'w').write(str(os.getpid()))\n"
            "time.sleep(60)\nimport jax\n"
        )
    else:
        (tmp_path / "site").mkdir()
        (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_WRITER_PID)
        (tmp_path / "imports.py").write_text("import jax\n")
        paths = [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]
        env = {"PYTHONPATH": os.pathsep.join(filter(None, paths))}
    run = _start(tmp_path, "-o", "t.tpumem", "imports.py", env=env)
    _wait_for(tmp_path / "loading-the-writer", run)
    deadline = time.monotonic() + WAIT_S
    while not (tmp_path / "loading-the-writer").read_text():  # (its pid is being written)
        assert time.monotonic() < deadline
        time.sleep(0.05)
    profiled = int((tmp_path / "loading-the-writer").read_text())
    assert (tmp_path / "t.tpumem").stat().st_size == 0
    _kill_tpumem(run, profiled)
    assert not (tmp_path / "t.tpumem").exists()


def test_tpumem_killed_while_it_records_leaves_the_ending_in_the_trace(tmp_path):
    """tpumem killed (SIGKILL) while the script runs: the profiled process ends
    (SIGTERM), its ending written first (it was 'not recorded', 10 of 12)."""
    (tmp_path / "keeps.py").write_text(KEEPS)
    run = _start(tmp_path, "-q", "-o", "t.tpumem", "keeps.py")
    _wait_for(tmp_path / "ready", run)
    profiled = load(tmp_path / "t.tpumem").metadata.pid
    _kill_tpumem(run, profiled)
    trace = load(tmp_path / "t.tpumem")
    assert trace.complete and trace.metadata.exit.signal == signal.SIGTERM
    assert any("tpumem profile ended before" in w for w in trace.metadata.warnings)


# JAX's import held back once it has begun (the trace's header is on disk): a
# signal then lands inside the framework's import.
SLOW_JAXLIB = textwrap.dedent(
    """
    import sys, time
    class SlowJaxlib:
        def find_spec(self, name, path=None, target=None):
            if name == "jaxlib":
                sys.meta_path.remove(self)
                open("importing-jax", "w").close()
                time.sleep(60)
            return None
    sys.meta_path.insert(0, SlowJaxlib())
    """
)


def test_sigint_as_the_framework_imports_records_how_the_run_ended(tmp_path):
    """Ctrl-C (here kill -INT tpumem) inside the framework's import: the ending is
    in the trace (it was 'not recorded', 11 of 60 times)."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(SLOW_JAXLIB)
    (tmp_path / "imports.py").write_text("import jax\n")
    path = os.pathsep.join(filter(None, [str(tmp_path / "site"), os.environ.get("PYTHONPATH")]))
    run = _start(tmp_path, "-o", "t.tpumem", "imports.py", env={"PYTHONPATH": path})
    _wait_for(tmp_path / "importing-jax", run)
    run.send_signal(signal.SIGINT)
    stderr = _finish(run)
    assert run.returncode == 128 + signal.SIGINT, stderr
    trace = load(tmp_path / "t.tpumem")
    assert trace.complete and trace.metadata.exit.signal == signal.SIGINT
    report = run_tpumem("report", str(tmp_path / "t.tpumem"), "--width", "200")
    assert "Ended  interrupted" in " ".join(report.stdout.split()).replace("Ended ", "Ended  ")


def test_a_run_stopped_before_it_imported_a_framework_says_so_in_one_line(tmp_path):
    (tmp_path / "waits.py").write_text(
        "import time\nopen('started', 'w').close()\ntime.sleep(60)\nimport jax\n"
    )
    run = _start(tmp_path, "-o", "t.tpumem", "waits.py")
    _wait_for(tmp_path / "started", run)
    run.send_signal(signal.SIGTERM)
    stderr = _finish(run)
    assert run.returncode == 128 + signal.SIGTERM
    assert stderr.strip().splitlines()[-1] == (
        "tpumem: error: waits.py was killed by SIGTERM before it imported a framework: "
        "nothing was recorded"
    )
    assert not (tmp_path / "t.tpumem").exists()  # no empty file left behind


KEEPS = textwrap.dedent(
    """
    import os, time
    import jax.numpy as jnp
    kept = jnp.ones(1024, jnp.float32).block_until_ready()
    open("ready", "w").close()
    for _ in range(600):
        if os.path.exists("go"):
            break
        time.sleep(0.05)
    """
)


def test_sigint_sent_to_tpumem_interrupts_the_script(tmp_path):
    """`kill -INT PID` reaches the script, as Ctrl-C would: it ends interrupted,
    and tpumem with it (the terminal's Ctrl-C is the next test)."""
    (tmp_path / "keeps.py").write_text(KEEPS)
    run = _start(tmp_path, "-q", "-o", "t.tpumem", "keeps.py")
    _wait_for(tmp_path / "ready", run)
    run.send_signal(signal.SIGINT)
    stderr = _finish(run)
    assert run.returncode == 128 + signal.SIGINT, stderr
    assert "KeyboardInterrupt" in stderr  # the script's own traceback
    ending = load(tmp_path / "t.tpumem").metadata.exit
    assert (ending.signal, ending.exception) == (signal.SIGINT, "KeyboardInterrupt")


@pytest.mark.skipif(platform.machine() != "x86_64", reason="tgkill's syscall number")
def test_a_signal_another_thread_of_tpumem_takes_is_passed_on_not_fatal(tmp_path):
    """The threads numpy and Arrow start in tpumem do not block the signals its
    main thread holds: a SIGTERM the kernel gives one of them is passed on to the
    script all the same (sent here to that thread, as the kernel may)."""
    (tmp_path / "keeps.py").write_text(KEEPS)
    run = _start(tmp_path, "-q", "-o", "t.tpumem", "keeps.py")
    _wait_for(tmp_path / "ready", run)

    def blocks_nothing(thread: str) -> bool:
        status = Path(f"/proc/{run.pid}/task/{thread}/status").read_text()
        return int(status.split("SigBlk:")[1].split()[0], 16) == 0

    threads = [t for t in os.listdir(f"/proc/{run.pid}/task") if int(t) != run.pid]
    others = [int(t) for t in threads if blocks_nothing(t)]
    if not others:
        (tmp_path / "go").touch()
        _finish(run)
        pytest.skip("no other thread of tpumem takes signals here")
    tgkill = 234
    assert ctypes.CDLL(None).syscall(tgkill, run.pid, others[0], signal.SIGTERM) == 0
    stderr = _finish(run)
    assert run.returncode == 128 + signal.SIGTERM, stderr
    assert load(tmp_path / "t.tpumem").metadata.exit.signal == signal.SIGTERM


COUNTS_SIGINT = textwrap.dedent(
    """
    import os, signal, time
    count = 0
    def count_it(number, frame):
        global count
        count += 1
    signal.signal(signal.SIGINT, count_it)
    open("ready", "w").close()
    while not os.path.exists("go"):
        time.sleep(0.01)
    time.sleep(0.5)  # a second SIGINT, if one were sent, would be counted by now
    with open("count", "w") as out:
        out.write(str(count))
    """
)


def test_ctrl_c_in_the_terminal_reaches_the_script_once(tmp_path):
    """The terminal sends Ctrl-C to its foreground group, the script with tpumem:
    tpumem does not send it a second time."""
    (tmp_path / "counts.py").write_text(COUNTS_SIGINT)
    terminal = InATerminal(tmp_path, "profile", "-q", "counts.py")
    try:
        _wait_for(tmp_path / "ready", terminal.process)
        terminal.press(b"\x03")  # Ctrl-C
        time.sleep(0.2)  # (for the count only: the script counts for 0.5 s more)
        (tmp_path / "go").touch()
    finally:
        output = terminal.finish(WAIT_S)
    assert (tmp_path / "count").read_text() == "1", output[-2000:]


FIRST = textwrap.dedent(
    """
    import os, time
    open("started", "w").close()
    while not os.path.exists("go"):
        time.sleep(0.05)
    import jax.numpy as jnp
    mine = jnp.ones(1000, jnp.float32).block_until_ready()
    """
)


def test_a_run_whose_trace_name_was_taken_reports_its_own_trace(tmp_path):
    """A second run with --force takes the first's -o before the first's trace
    was written (a live one is refused: the next test). The first reports from the
    file it created, saved under the next free name, and says so in one line."""
    (tmp_path / "first.py").write_text(FIRST)
    (tmp_path / "second.py").write_text(
        "import jax.numpy as jnp\ntheirs = jnp.ones(3000, jnp.float32).block_until_ready()\n"
    )
    first = _start(tmp_path, "-o", "same.tpumem", "first.py")
    _wait_for(tmp_path / "started", first)
    second = profile(tmp_path, "-q", "--force", "-o", "same.tpumem", "second.py")
    assert second.returncode == 0, second.stderr[-3000:]
    (tmp_path / "go").touch()
    stderr = _finish(first)
    assert first.returncode == 0, stderr
    said = [line for line in stderr.splitlines() if "another file took the name" in line]
    assert said == [
        "tpumem: same.tpumem: another file took the name of this run's trace while it ran "
        "(a run given the same -o with --force?); this run's is saved as same-2.tpumem"
    ]
    assert "tpumem: trace written to same-2.tpumem" in stderr
    assert load(tmp_path / "same-2.tpumem").metadata.command == ("first.py",)
    assert load(tmp_path / "same.tpumem").metadata.command == ("second.py",)  # untouched


def test_a_trace_being_written_is_said_so_and_neither_replaced_nor_added_to(tmp_path):
    (tmp_path / "keeps.py").write_text(KEEPS)
    run = _start(tmp_path, "-q", "-o", "live.tpumem", "keeps.py")
    try:
        _wait_for(tmp_path / "ready", run)
        pid = load(tmp_path / "live.tpumem").metadata.pid
        report = run_tpumem("report", str(tmp_path / "live.tpumem"), "-f", "json")
        assert report.returncode == 0, report.stderr
        warnings = json.loads(report.stdout)["metadata"]["warnings"]
        assert any(f"still being written (by process {pid})" in w for w in warnings), warnings
        assert not any("crashed" in w for w in warnings)
        text = run_tpumem("report", str(tmp_path / "live.tpumem"), "--width", "200").stdout
        assert "not yet: the run goes on" in text and "crashed" not in text
        (tmp_path / "run").mkdir()
        os.link(tmp_path / "live.tpumem", tmp_path / "run" / "live.tpumem")
        (tmp_path / "run" / "other.tpumem").write_bytes((DATA / "mlp.tpumem").read_bytes())
        table = run_tpumem("report", str(tmp_path / "run"), "--width", "200").stdout
        assert "running" in table and "unclosed" not in table
        before = (tmp_path / "live.tpumem").read_bytes()
        tpu = run_tpumem("report", "--tpu", "v5e:1x1", str(tmp_path / "live.tpumem"))
        assert_one_line_error(tpu, "live.tpumem: still being written", str(pid))
        (tmp_path / "other.py").write_text("print('never runs')\n")
        again = run_tpumem("profile", "--force", "-o", "live.tpumem", "other.py", cwd=tmp_path)
        assert_one_line_error(again, "live.tpumem: still being written", "not replaced")
        assert "never runs" not in again.stdout
        assert (tmp_path / "live.tpumem").read_bytes()[: len(before)] == before
    finally:
        (tmp_path / "go").touch()
    stderr = _finish(run)
    assert run.returncode == 0, stderr
    trace = load(tmp_path / "live.tpumem")
    assert trace.complete and trace.metadata.exit.code == 0
    assert trace.metadata.warnings == ()


# Two children of the script record themselves, one ignoring SIGTERM; each
# writes its pid when its array is made.
CHILDREN = textwrap.dedent(
    """
    import subprocess, sys
    children = [subprocess.Popen([sys.executable, "child.py", how]) for how in ("deaf", "plain")]
    for child in children:
        child.wait()
    """
)
CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    if sys.argv[1] == "deaf":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    import jax.numpy as jnp
    kept = jnp.ones(1024, jnp.float32).block_until_ready()
    with open(f"{sys.argv[1]}.part", "w") as out:
        out.write(str(os.getpid()))
    os.rename(f"{sys.argv[1]}.part", f"{sys.argv[1]}.pid")
    time.sleep(300)
    """
)


@contextlib.contextmanager
def _followed_children(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, dict[str, int]]]:
    """`profile --follow` of a script whose two recording children run on, one
    deaf to SIGTERM: the run and the children's pids by how they hear it, each
    child killed as the block ends (on the code before, they ran on under PID 1)."""
    (tmp_path / "parent.py").write_text(CHILDREN)
    (tmp_path / "child.py").write_text(CHILD)
    run = _start(tmp_path, "-q", "--follow", "-o", "run", "parent.py")
    pids: dict[str, int] = {}
    try:
        for how in ("deaf", "plain"):
            _wait_for(tmp_path / f"{how}.pid", run)
            pids[how] = int((tmp_path / f"{how}.pid").read_text())
        yield run, pids
    finally:
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                if not _gone(pid):
                    os.kill(pid, signal.SIGKILL)


def test_no_followed_process_outlives_tpumem_and_each_trace_says_how_it_ended(tmp_path):
    with _followed_children(tmp_path) as (run, pids):
        run.send_signal(signal.SIGTERM)
        stderr = _finish(run)
    assert run.returncode == 128 + signal.SIGTERM, stderr
    assert [pid for pid in pids.values() if not _gone(pid)] == []
    assert (
        "tpumem: the script ended with 2 processes it started still running: sent SIGTERM, "
        "and SIGKILL to 1 still running 5 s later"
    ) in stderr
    traces = {load(path).metadata.pid: load(path) for path in (tmp_path / "run").glob("*.tpumem")}
    assert sorted(traces) == sorted(pids.values())  # the parent started no device
    for how, number in (("deaf", signal.SIGKILL), ("plain", signal.SIGTERM)):
        trace = traces[pids[how]]
        assert trace.complete and trace.metadata.exit.signal == number
        assert trace.metadata.recorded_by == "tpumem profile --follow"


def test_no_followed_process_outlives_a_killed_tpumem_and_each_trace_says_how_it_ended(
    tmp_path,
):
    """tpumem killed (SIGKILL): no subreaper is left to end the tree. Each
    recording process watches tpumem and ends itself, its ending written first:
    SIGTERM, and SIGKILL 5 s later for the one that ignores SIGTERM (both ran on
    under PID 1, their traces unclosed)."""
    with _followed_children(tmp_path) as (run, pids):
        run.kill()
        _finish(run)
        deadline = time.monotonic() + 30
        while not all(_gone(pid) for pid in pids.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        running = [pid for pid in pids.values() if not _gone(pid)]
    assert running == []
    traces = {load(path).metadata.pid: path for path in (tmp_path / "run").glob("*.tpumem")}
    assert sorted(traces) == sorted(pids.values())
    for how, number in (("deaf", signal.SIGKILL), ("plain", signal.SIGTERM)):
        trace = load(traces[pids[how]])
        assert trace.complete and trace.metadata.exit.signal == number
        assert any("tpumem profile --follow ended before" in w for w in trace.metadata.warnings)
        report = run_tpumem("report", str(traces[pids[how]]), "--width", "200")
        assert report.returncode == 0, report.stderr
        assert f"killed by {number.name}" in report.stdout


# A launcher between the script and the recording child, which records nothing
# and outlives its child: it is started from a thread that ends at once (Linux's
# parent-death signal comes then too, and must not end it while tpumem lives).
LAUNCHER = textwrap.dedent(
    """
    import subprocess, sys, threading
    started = []
    def start():
        started.append(subprocess.Popen([sys.executable, "middle.py"]))
    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    started[0].wait()
    """
)
MIDDLE = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen([sys.executable, "child.py", "plain"])
    child.wait()
    with open("middle.part", "w") as out:
        out.write(str(os.getpid()))
    os.rename("middle.part", "middle.pid")
    time.sleep(300)
    """
)


def test_a_launcher_between_a_killed_tpumem_and_its_workers_ends_too(tmp_path):
    (tmp_path / "parent.py").write_text(LAUNCHER)
    (tmp_path / "middle.py").write_text(MIDDLE)
    (tmp_path / "child.py").write_text(CHILD.replace("time.sleep(300)", "time.sleep(1)"))
    run = _start(tmp_path, "-q", "--follow", "-o", "run", "parent.py")
    middle = None
    try:
        _wait_for(tmp_path / "middle.pid", run)  # its starting thread long ended
        middle = int((tmp_path / "middle.pid").read_text())
        assert not _gone(middle)
        run.kill()
        _finish(run)
        deadline = time.monotonic() + 30
        while not _gone(middle) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(middle)
    finally:
        if middle is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(middle, signal.SIGKILL)


FORKS_AND_EXECS = textwrap.dedent(
    """
    import os
    import jax.numpy as jnp
    kept = jnp.ones(1024, jnp.float32).block_until_ready()
    child = os.fork()
    if child == 0:
        os.execvp("true", ["true"])
    os.waitpid(child, 0)
    """
)


def test_a_forked_child_that_runs_another_program_is_no_rank(tmp_path):
    (tmp_path / "forks.py").write_text(FORKS_AND_EXECS)
    result = profile(tmp_path, "-q", "--follow", "-o", "run", "forks.py")
    assert result.returncode == 0, result.stderr[-3000:]
    (trace,) = [load(path) for path in (tmp_path / "run").glob("*.tpumem")]
    assert trace.complete and trace.metadata.command == ("forks.py",)
    report = run_tpumem("report", str(tmp_path / "run"), "-f", "json")
    assert report.returncode == 0, report.stderr
    (process,) = json.loads(report.stdout)["processes"]
    assert process["complete"]


# A followed Python process that becomes another program (os.execvp), and whose
# parent then ends as it means to, while tpumem lives on.
BECOMES_ANOTHER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    if sys.argv[1:] == ["middle"]:
        os.execvp("sleep", ["sleep", "4"])
    middle = subprocess.Popen([sys.executable, __file__, "middle"])
    time.sleep(1)
    with open("middle.pid", "w") as out:
        out.write(str(middle.pid))
    """
)
WAITS = textwrap.dedent(
    """
    import subprocess, sys, time
    subprocess.run([sys.executable, "becomes.py"], check=True)
    time.sleep(5)
    """
)


def test_a_followed_process_that_becomes_another_program_lives_its_life(tmp_path):
    """The parent-death signal that ends a launcher once tpumem is gone outlives an
    exec, its handler does not: a real-time one's default ended the program the
    process became (sleep) as soon as its parent ended, with tpumem alive. Its
    signal now does nothing by default: the program runs to its end."""
    (tmp_path / "becomes.py").write_text(BECOMES_ANOTHER)
    (tmp_path / "waits.py").write_text(WAITS)
    run = _start(tmp_path, "-q", "--follow", "-o", "run", "waits.py")
    try:
        _wait_for(tmp_path / "middle.pid", run)
        middle = int((tmp_path / "middle.pid").read_text())
        time.sleep(1.5)  # its parent has ended by now
        assert not _gone(middle)
    finally:
        _finish(run)


JAX_LOOP = textwrap.dedent(
    """
    import jax.numpy as jnp
    x = jnp.ones((256, 256))
    open("ready", "w").close()
    while True:
        x = (x @ x) / 256.0
    """
)


def test_an_interrupt_in_a_jax_loop_shows_no_frame_of_tpumems(tmp_path):
    """`timeout -s INT` (and a second Ctrl-C) signals the process group and tpumem
    both: the script gets two interrupts. The first lands where the loop is, often
    inside tpumem's hook of the jitted call; the second as tpumem writes how the
    run ended. Neither shows a frame of tpumem's: the traceback is the script's."""
    (tmp_path / "loop.py").write_text(JAX_LOOP)
    run = _start(tmp_path, "-q", "-o", "t.tpumem", "loop.py", start_new_session=True)
    _wait_for(tmp_path / "ready", run)
    time.sleep(1.0)  # (well into the loop)
    os.killpg(run.pid, signal.SIGINT)
    run.send_signal(signal.SIGINT)
    stderr = _finish(run)
    assert run.returncode == 128 + signal.SIGINT, stderr
    assert "KeyboardInterrupt" in stderr and 'loop.py", line' in stderr
    assert re.search(r'File ".*/tpumem/', stderr) is None, stderr
    assert load(tmp_path / "t.tpumem").metadata.exit.signal == signal.SIGINT
