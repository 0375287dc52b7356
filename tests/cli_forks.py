"""`python -m tpumem ARGS` for the suite, each command still a process of its own,
forked from a server that imported tpumem once.

A fresh `python -m tpumem` spends 0.25-0.3 s of its 0.4 s importing numpy, pyarrow
and the analysis before reading a small trace; the suite runs some 250 of them in
its fast lanes. The server (this file, run as a script) imports them and forks a
child per command, which runs the module as `python -m` does
(runpy._run_module_as_main), in the test's directory and environment, with its
standard output and error on pipes to the test: the exit status, the output, a
crash and a kill are the command's own, as they would be.

A server serves one environment: a command in another one (a test that changed a
variable) gets a server of its own, since the interpreter reads some of it at its
start (PYTHONPATH, the encodings). What differs from a fresh process: standard
input is /dev/null, and the modules the server imported are there in every child
(tests/cli/test_imports.py checks what the CLI imports in processes of its own).
TPUMEM_TEST_FRESH_PROCESSES=1 starts every command fresh.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

FRESH_VARIABLE = "TPUMEM_TEST_FRESH_PROCESSES"
# What pytest changes from one test to the next; a command's environment keeps it.
_PER_TEST = ("PYTEST_CURRENT_TEST",)
_HEADER = 8  # the byte length of a request, before it


def run_tpumem_process(
    args: list[str], cwd: Path | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tpumem", *args]
    # One command at a time per server; a second at once (a test's thread) runs fresh.
    if os.environ.get(FRESH_VARIABLE) == "1" or not _in_flight.acquire(blocking=False):
        return subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=timeout)
    try:
        environment = dict(os.environ)
        returncode, stdout, stderr = _server_for(environment).run(args, cwd, environment, timeout)
    finally:
        _in_flight.release()
    return subprocess.CompletedProcess(command, returncode, stdout, stderr)


def close_servers() -> None:
    for server in _servers.values():
        server.close()
    _servers.clear()


_in_flight = threading.Lock()
_servers: dict[frozenset[tuple[str, str]], ForkServer] = {}


def _server_for(environment: dict[str, str]) -> ForkServer:
    key = frozenset((k, v) for k, v in environment.items() if k not in _PER_TEST)
    server = _servers.get(key)
    if server is None or server.process.poll() is not None:
        server = _servers[key] = ForkServer(environment)
    return server


class ForkServer:
    """The test's side: a request (argv, directory, environment) with the two pipes'
    write ends over a Unix socket; back come the child's pid and its exit status."""

    def __init__(self, environment: dict[str, str]) -> None:
        self.socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=environment,
            pass_fds=[theirs.fileno()],
        )
        theirs.close()
        self.replies = self.socket.makefile("r")

    def run(
        self, args: list[str], cwd: Path | None, environment: dict[str, str], timeout: float
    ) -> tuple[int, str, str]:
        request = json.dumps({"argv": args, "cwd": str(cwd or Path.cwd()), "env": environment})
        body = request.encode()
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            header = len(body).to_bytes(_HEADER, "little")
            socket.send_fds(self.socket, [header], [out_write, err_write])
            self.socket.sendall(body)
        finally:
            os.close(out_write)
            os.close(err_write)
        pid = int(self.replies.readline())
        deadline = time.monotonic() + timeout
        try:
            stdout, stderr = _read_until_closed(out_read, err_read, deadline)
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self.replies.readline()
            raise subprocess.TimeoutExpired(["python", "-m", "tpumem", *args], timeout) from None
        return int(self.replies.readline()), stdout, stderr

    def close(self) -> None:
        self.replies.close()
        self.socket.close()  # the server ends at the end of its socket
        self.process.wait(timeout=30)


def _read_until_closed(out_read: int, err_read: int, deadline: float) -> tuple[str, str]:
    """Both pipes read to their end (the child and anything it left running closed
    them), as subprocess.run reads them."""
    chunks: dict[int, list[bytes]] = {out_read: [], err_read: []}
    with selectors.DefaultSelector() as selector:
        for descriptor in chunks:
            selector.register(descriptor, selectors.EVENT_READ)
        try:
            while selector.get_map():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.fd].append(data)
                    else:
                        selector.unregister(key.fd)
        finally:
            os.close(out_read)
            os.close(err_read)
    return _text(chunks[out_read]), _text(chunks[err_read])


def _text(chunks: list[bytes]) -> str:
    """As text=True decodes: universal newlines."""
    return b"".join(chunks).decode().replace("\r\n", "\n").replace("\r", "\n")


def _serve(descriptor: int) -> None:
    """The server's side: one child at a time, forked with nothing running but this
    thread, waited for, its status sent back."""
    import importlib

    # What a command's process spends its start on: the CLI, the analysis, the
    # commands and their reporters (a fork then finds them imported).
    for module in _PRELOADED:
        importlib.import_module(module)

    channel = socket.socket(fileno=descriptor)
    while True:
        header, descriptors, _, _ = socket.recv_fds(channel, _HEADER, 2)
        if not header:
            return
        body = b""
        size = int.from_bytes(header, "little")
        while len(body) < size:
            body += channel.recv(size - len(body))
        request = json.loads(body)
        pid = os.fork()
        if pid == 0:
            channel.close()
            _run_command(request, *descriptors)
        for received in descriptors:
            os.close(received)
        channel.sendall(f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        channel.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())


_PRELOADED = (
    "tpumem.cli",
    "tpumem.analysis",
    "tpumem.report",
    "tpumem.commands.report",
    "tpumem.commands.compare",
    "tpumem.commands.diff",
    "tpumem.commands.check",
    "tpumem.commands.import_",
    "tpumem.commands.export",
    "tpumem.report.text",
    "tpumem.report.markdown",
    "tpumem.report.json_report",
    "tpumem.report.html",
    "tpumem.report.run_report",
    "tpumem.report.run_json",
    "tpumem.report.diff_report",
    "tpumem.report.compare_text",
    "tpumem.report.compare_json",
)


def _run_command(request: dict[str, Any], stdout: int, stderr: int) -> None:
    """The child: `python -m tpumem ARGV` as the interpreter would run it, to the end
    the interpreter would give it."""
    import runpy
    import traceback

    code: object = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        stdin = os.open(os.devnull, os.O_RDONLY)
        for source, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(source, target)
            os.close(source)
        sys.path[0] = request["cwd"]  # where `python -m` puts the directory it starts in
        sys.argv = [sys.argv[0], *request["argv"]]
        runpy._run_module_as_main("tpumem", alter_argv=True)  # type: ignore[attr-defined]
        code = 0
    except SystemExit as stop:
        code = stop.code
    except BaseException:
        traceback.print_exc()
    os._exit(_ending(code))


def _ending(code: object) -> int:
    """What the interpreter's own exit does after SystemExit(code): waits for the
    threads left running, runs the exit handlers, flushes the output."""
    import atexit

    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code & 0xFF
    else:
        print(code, file=sys.stderr)
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        return 120
    return status


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
