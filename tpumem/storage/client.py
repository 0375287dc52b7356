"""One client for object storage, its waits bounded, and its errors as one line
each.

No wait on the network is without end: a connection is waited for 10 s, a
silence inside an answer 60 s, a request is tried twice, and a call that hears
nothing for 150 s in all (a server that takes the connection and never answers,
one that nothing reaches; gcsfs tries a request six times whatever it is told)
ends in one line naming the endpoint. A transfer waits as long as its bytes
move. TPUMEM_STORAGE_WAIT_S sets the 150 s (the others follow it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from tpumem.errors import TpumemError
from tpumem.progress import progress, turning

_PACKAGES = {"gs": "gcsfs", "gcs": "gcsfs", "s3": "s3fs"}
WAIT_VARIABLE = "TPUMEM_STORAGE_WAIT_S"


@dataclass(frozen=True, slots=True)
class Bounds:
    """How long tpumem waits on object storage, in seconds."""

    wait_s: float = 150.0  # a call that hears nothing (its tries and all)
    answer_s: float = 60.0  # a silence inside one answer: the request is tried again
    connect_s: float = 10.0  # a connection being made
    tries: int = 2  # a request's, where a silence or a dropped connection ends one
    transfer_piece: int = 8 << 20  # bytes a put sends between its reports of progress

    @staticmethod
    def from_environment() -> Bounds:
        """The bounds, TPUMEM_STORAGE_WAIT_S setting the wait (a silence in an
        answer is its share, as the defaults are: a slow server given longer
        gets longer to answer; a connection at most its default); one line for
        a value that is not a number of seconds."""
        text = os.environ.get(WAIT_VARIABLE, "").strip()
        if not text:
            return Bounds()
        try:
            wait_s = float(text)
        except ValueError:
            wait_s = float("nan")
        if not 1 <= wait_s <= 86_400:  # (NaN too)
            raise TpumemError(f"{WAIT_VARIABLE}={text!r}: give seconds, 1 to 86400")
        default = Bounds()
        answer_s = default.answer_s / default.wait_s * wait_s
        return Bounds(wait_s, answer_s, min(default.connect_s, answer_s))


class StorageError(TpumemError):
    """What object storage would not give or take: it ends the command (it says
    nothing of a trace, which is not left out of a run for it)."""


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for `url`, its calls bounded (BoundedClient), and the
    path in it; one line where the client is not installed or cannot start."""
    scheme = url.split(":", 1)[0]
    _quiet_clients()
    bounds = Bounds.from_environment()
    try:
        import fsspec  # type: ignore[import-untyped]

        fs, path = fsspec.core.url_to_fs(url, **_client_options(scheme, bounds))
        if scheme == "s3":
            fs.retries = bounds.tries  # (a class attribute of s3fs', no argument)
        return BoundedClient(fs, bounds), path
    except ImportError:
        package = _PACKAGES.get(scheme, "fsspec")
        extra = "gcs" if package == "gcsfs" else "s3"
        raise TpumemError(
            f"{url}: object storage at {scheme}:// needs {package} (pip install 'tpumem[{extra}]')"
        ) from None
    except Exception as error:  # (a client that cannot start: no credentials, a bad URL)
        raise TpumemError(f"{url}: {why(error)}") from None


def _client_options(scheme: str, bounds: Bounds) -> dict[str, Any]:
    """The client's own bounds: on a connection, on a silence inside an answer,
    on its tries (gcsfs' six are fixed: BoundedClient ends what they would not)."""
    if scheme == "s3":
        return {  # (botocore's tries left at one: s3fs' own are set on the client)
            "config_kwargs": {
                "connect_timeout": bounds.connect_s,
                "read_timeout": bounds.answer_s,
                "retries": {"max_attempts": 1, "mode": "standard"},
            }
        }
    if scheme in ("gs", "gcs"):
        import aiohttp

        return {
            "requests_timeout": aiohttp.ClientTimeout(
                total=None, sock_connect=bounds.connect_s, sock_read=bounds.answer_s
            )
        }
    return {}


class NoAnswer(Exception):
    """Object storage said nothing for as long as tpumem waits."""


class _Moved:
    """An fsspec callback that notes when a transfer's bytes last moved."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def set_size(self, size: int | None) -> None:
        self.last = time.monotonic()

    def absolute_update(self, value: int) -> None:
        self.last = time.monotonic()

    def relative_update(self, inc: int = 1) -> None:
        self.last = time.monotonic()

    def call(self, *args: Any, **kwargs: Any) -> None:
        self.last = time.monotonic()

    def branched(self, *args: Any, **kwargs: Any) -> _Moved:
        return self


class BoundedClient:
    """An fsspec filesystem whose calls on the network end once they hear nothing
    for `Bounds.wait_s` (NoAnswer, which `said` words, naming the endpoint); the
    rest of it (a path's URL, the listing cache) as it is."""

    _CALLS = frozenset({"ls", "info", "exists", "find", "cat_ranges", "rm_file"})
    _TRANSFERS = frozenset({"get_file", "put_file"})

    def __init__(self, fs: Any, bounds: Bounds) -> None:
        self._fs = fs
        self.bounds = bounds

    def __getattr__(self, name: str) -> Any:
        if name in self._CALLS or name in self._TRANSFERS:
            return lambda *args, **kwargs: self._call(name, args, kwargs)
        return getattr(self._fs, name)

    # The clients' isfile and isdir take an error for "no" (fsspec's any error,
    # gcsfs' an OSError, which a timeout is): a server that does not answer too,
    # and the command would wait again on the next call.
    def isfile(self, path: str) -> bool:
        return self._kind(path) == "file"

    def isdir(self, path: str) -> bool:
        return self._kind(path) == "directory"

    def _kind(self, path: str) -> str | None:
        try:
            return str(self._call("info", (path,), {})["type"])
        except FileNotFoundError:
            return None

    def endpoint(self) -> str:
        """Where the client sends its requests."""
        location = getattr(type(self._fs), "_location", None)
        if isinstance(location, property):  # gcsfs: its endpoint, or the emulator's
            return str(location.fget(self._fs))  # type: ignore[misc]
        client = getattr(self._fs, "_s3", None)  # s3fs, once connected
        if client is not None:
            return str(client.meta.endpoint_url)
        given = getattr(self._fs, "client_kwargs", {}).get("endpoint_url")
        return str(
            given
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL", "S3")
        )

    def _call(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """fs.<name>(*args, **kwargs), run on fsspec's loop and waited for here a
        second at a time: ended once nothing is heard for the bound (a transfer's
        moving bytes are heard), with the spinner saying so meanwhile."""
        moved = _Moved()
        if name in self._TRANSFERS:
            kwargs = {**kwargs, "callback": moved}
            if name == "put_file":
                kwargs["chunksize"] = self.bounds.transfer_piece
        started = time.monotonic()
        future = asyncio.run_coroutine_threadsafe(
            getattr(self._fs, f"_{name}")(*args, **kwargs), self._fs.loop
        )
        with ExitStack() as spinner:
            say: Callable[[str], None] | None = None
            while not concurrent.futures.wait([future], timeout=1.0)[0]:
                silent_s = time.monotonic() - max(started, moved.last)
                if silent_s >= self.bounds.wait_s:
                    future.cancel()
                    raise self._no_answer(time.monotonic() - started)
                if silent_s >= 3:
                    if say is None:
                        say = turning() or spinner.enter_context(progress("object storage"))
                    waited = f"{silent_s:.0f} s of {self.bounds.wait_s:.0f}"
                    say(f"no answer from {self.endpoint()}: {waited}")
        try:
            result = future.result()
        except Exception as error:
            if _timed_out(error):
                raise self._no_answer(time.monotonic() - started) from None
            raise
        if name == "cat_ranges" and any(
            isinstance(one, BaseException) and _timed_out(one) for one in result
        ):  # (each range's error is in its place)
            raise self._no_answer(time.monotonic() - started)
        return result

    def _no_answer(self, waited_s: float) -> NoAnswer:
        return NoAnswer(
            f"no answer from {self.endpoint()} in {waited_s:.0f} s (tpumem waits "
            f"{self.bounds.wait_s:.0f} s at most: {WAIT_VARIABLE} sets it)"
        )


def _timed_out(error: BaseException) -> bool:
    """Whether a client's error is a wait that ran out (each client has its own
    kinds: botocore's, aiohttp's, asyncio's, fsspec's), or a cause of it was."""
    seen: BaseException | None = error
    for _ in range(8):
        if seen is None:
            return False
        if isinstance(seen, TimeoutError) or any(
            "Timeout" in kind.__name__ for kind in type(seen).__mro__
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _quiet_clients() -> None:
    """The clients log what they retry, tracebacks and all, to stderr (Python's
    last-resort handler): the one line `said` gives is what the user reads."""
    for name in ("gcsfs", "s3fs", "fsspec", "aiobotocore", "botocore", "aiohttp"):
        logger = logging.getLogger(name)
        if not logger.handlers:
            logger.addHandler(logging.NullHandler())
            logger.propagate = False


@contextmanager
def said(where: str) -> Iterator[None]:
    """A storage client's errors as one line: no bucket, no permission, no
    credentials, the server out of reach."""
    try:
        yield
    except TpumemError:
        raise
    except Exception as error:  # (each client has its own kinds of error)
        raise StorageError(f"{where}: {why(error)}") from None


def why(error: BaseException) -> str:
    """What a client's error means to the user, in a few words. (gcsfs and s3fs
    raise their own kinds, or OSError with the server's words: read by both.)"""
    text = " ".join(str(error).split()) or type(error).__name__
    if isinstance(error, NoAnswer):
        return text
    lowered = text.lower()
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left to keep it on this machine (TMPDIR chooses where)"
    if isinstance(error, FileNotFoundError) or "does not exist" in lowered:
        return "no such bucket or object"
    if "credential" in lowered or "anonymous caller" in lowered or "401" in lowered:
        return f"no credentials for it ({text[:200]})"
    if isinstance(error, PermissionError) or "forbidden" in lowered or "403" in lowered:
        return "permission denied (the credentials in the environment may not reach it)"
    return f"{type(error).__name__}: {text[:200]}"


def content_tag(entry: dict[str, Any]) -> str | None:
    """What storage says of an object's content, from its listing: S3's ETag (an
    MD5 of the object or of its parts), GCS's MD5 (CRC32C for a composite object).
    Another object put in its place has another, bar a collision of the checksum
    and the size both."""
    for key in ("ETag", "md5Hash", "crc32c"):  # (a 128-bit digest before a 32-bit one)
        value = entry.get(key)
        if isinstance(value, str) and value:
            return f"{key}:{value.strip(chr(34))}"
    return None
