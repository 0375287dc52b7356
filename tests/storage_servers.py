"""Real object storage servers on 127.0.0.1 for the tests: Google Cloud Storage's
(gcp-storage-emulator, behind gcsfs) and S3's (moto's server mode, behind s3fs),
each started as its own process; and the environment that points the clients at
them, as a user's credentials and endpoints would."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _wait_for(port: int, server: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the storage server ended: {log.read_text()[-2000:]}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"the storage server did not listen on {port}: {log.read_text()[-2000:]}")


@contextmanager
def storage_servers(directory: Path) -> Iterator[dict[str, str]]:
    """Both servers, running until the block ends; the environment for clients."""
    gcs_port, s3_port = _free_port(), _free_port()
    commands = [
        [
            *(str(BIN / "gcp-storage-emulator"), "start", "--host", "127.0.0.1"),
            *("--port", str(gcs_port), "--in-memory"),
        ],
        [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(s3_port)],
    ]
    servers = []
    try:
        for command, port in zip(commands, (gcs_port, s3_port), strict=True):
            log = directory / f"server-{port}.log"
            with open(log, "w") as output:
                server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
            servers.append(server)
            _wait_for(port, server, log)
        yield {
            "STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{gcs_port}",
            # gcsfs' hierarchical-namespace probe speaks gRPC over TLS, which the
            # emulator does not: it would wait a minute, then fall back.
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{s3_port}",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()


def filesystem(scheme: str):
    """The client for `scheme` as the tests' own process uses it (the environment set)."""
    import fsspec

    return fsspec.filesystem(scheme, token="anon") if scheme == "gs" else fsspec.filesystem(scheme)


def upload(local: Path, url: str) -> None:
    """A run's directory (its traces and summaries) to `url`."""
    scheme, rest = url.split("://", 1)
    fs = filesystem(scheme)
    bucket = rest.split("/", 1)[0]
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    for path in sorted(local.iterdir()):
        fs.pipe(f"{rest.rstrip('/')}/{path.name}", path.read_bytes())


@contextmanager
def stalled_server() -> Iterator[str]:
    """A server on 127.0.0.1 that takes every connection and never answers (a
    proxy or a storage server hung); its endpoint, until the block ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def take() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])  # (kept open, never read nor answered)
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        for connection in [*held, listener]:
            connection.close()


@contextmanager
def black_hole() -> Iterator[str]:
    """An endpoint on 127.0.0.1 where no connection is ever made, as behind a
    firewall that drops what it is sent: a listener that never accepts, its queue
    full (Linux then drops each new connection's SYN)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(2):  # (the first fills the queue of one, the second finds it full)
        filler = socket.socket()
        filler.settimeout(0.5)
        with suppress(OSError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        for connection in [*fillers, listener]:
            connection.close()
