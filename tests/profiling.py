"""Running `tpumem profile` and plain python on a script, each in its own process."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

from conftest import assert_written_json_valid
from tpumem.trace.records import DROPPED

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}  # TensorFlow's start-up chatter


def profile(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "tpumem", "profile", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **QUIET, **(env or {})},
        timeout=300,
    )
    # What the adapters record is what the reader expects (trace/records.py).
    assert DROPPED not in result.stderr, result.stderr[-2000:]
    assert_written_json_valid(result, ["profile", *args], cwd)
    return result


def run_compare(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """`tpumem compare ARGS` in its own process; scripts among them are profiled
    first, each in its own process, which takes a while."""
    result = subprocess.run(
        [sys.executable, "-m", "tpumem", "compare", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **QUIET},
        timeout=900,
    )
    assert_written_json_valid(result, ["compare", *args], cwd)
    return result


def run_plain(cwd: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python ARGS`, without tpumem: what the profiled run must look like."""
    return subprocess.run(
        [sys.executable, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **QUIET, **(env or {})},
        timeout=300,
    )


def last_json(stdout: str) -> dict:
    return json.loads(stdout.strip().splitlines()[-1])


# How a profiled script can end badly: (its last statement, tpumem's exit status,
# the words the report uses for it).
BAD_ENDINGS = {
    "exception": ("raise ValueError('boom')", 1, "uncaught exception: ValueError: boom"),
    "sigkill": (
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
        128 + 9,
        "killed by SIGKILL",
    ),
}


def profile_bad_ending(
    cwd: Path, script: str, ending: tuple[str, int, str], *options: str, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Profiles `script` (with `{ending}` where its last statement goes) as bad.py
    and checks the exit status and the report's words for the ending."""
    statement, status, words = ending
    (cwd / "bad.py").write_text(script.format(ending=statement))
    result = profile(cwd, *options, "bad.py", env=env)
    assert result.returncode == status, result.stderr[-3000:]
    assert words in result.stderr  # the report says how the run ended
    return result


class InATerminal:
    """`tpumem ARGS` with a pseudo-terminal of its own as its controlling terminal,
    in the terminal's foreground group as a shell starts a job: what a key such as
    Ctrl-C (`press(b"\\x03")`) does there is what it does for a user."""

    def __init__(self, cwd: Path, *args: str) -> None:
        self.leader, follower = os.openpty()

        def own_terminal() -> None:  # (after setsid: the pty becomes the controlling one)
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            signal.signal(signal.SIGINT, signal.SIG_DFL)

        self.process = subprocess.Popen(
            [sys.executable, "-m", "tpumem", *args],
            cwd=cwd,
            env={**os.environ, **QUIET},
            stdin=follower,
            stdout=follower,
            stderr=follower,
            start_new_session=True,
            preexec_fn=own_terminal,
        )
        os.close(follower)

    def press(self, keys: bytes) -> None:
        os.write(self.leader, keys)

    def finish(self, timeout_s: float = 120) -> str:
        """What the terminal showed, once the process has ended (killed if it
        does not end in `timeout_s`)."""
        output = b""
        deadline = time.monotonic() + timeout_s
        try:
            while self.process.poll() is None or select.select([self.leader], [], [], 0)[0]:
                if time.monotonic() > deadline:
                    break
                if select.select([self.leader], [], [], 0.1)[0]:
                    try:
                        output += os.read(self.leader, 65536)
                    except OSError:
                        break
        finally:
            with contextlib.suppress(OSError):
                os.close(self.leader)
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
        return output.decode(errors="replace")


def until_written(marker: str = "[512,1024]") -> str:
    """A script's lines that wait until its trace, bad.tpumem, holds `marker` (a
    shape as the trace writes it, "[512,1024]", never so in the script's source;
    or a line's code, which the trace keeps with the buffer the line made): a
    fixed wait for the writer is too short on a busy machine. Found in the file's
    bytes, then in a row the trace's reader reads back: Arrow writes a batch's
    dictionary (the marker) before its rows, and on a busy machine the run ended
    between the two."""
    return f"""
def written():
    try:
        with open("bad.tpumem", "rb") as trace:
            if {marker.encode()!r} not in trace.read():
                return False
        from tpumem.trace.reader import load
        table = load("bad.tpumem").table
        return any(
            {marker!r} in value
            for name in ("shape", "source", "stack", "text")
            for value in table.column(name).to_pylist()
            if isinstance(value, str)
        )
    except Exception:  # (not there yet, or cut in the middle of a batch)
        return False

deadline = time.monotonic() + 120
while not written() and time.monotonic() < deadline:
    time.sleep(0.1)
"""
