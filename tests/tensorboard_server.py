"""A real TensorBoard server on loopback for tests and checks, with bounded
waits, stopped when done."""

from __future__ import annotations

import contextlib
import gzip
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read()
        if response.headers.get("Content-Encoding") == "gzip":  # the profile plugin's data
            body = gzip.decompress(body)
        return body


@contextlib.contextmanager
def tensorboard_server(logdir: Path, start_timeout_s: float = 120) -> Iterator[str]:
    """Yields the server's base URL once it answers."""
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tensorboard.main",
            "--logdir",
            str(logdir),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **QUIET},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if server.poll() is not None:
                raise RuntimeError(server.stderr.read().decode()[-2000:])
            try:
                get(f"{base}/data/logdir")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"TensorBoard did not answer in {start_timeout_s} s"
                    ) from None
                time.sleep(0.5)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=20)
