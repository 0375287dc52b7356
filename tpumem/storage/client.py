"""One client for object storage, and its errors as one line each."""

from __future__ import annotations

import errno
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tpumem.errors import TpumemError

_PACKAGES = {"gs": "gcsfs", "gcs": "gcsfs", "s3": "s3fs"}


class StorageError(TpumemError):
    """What object storage would not give or take: it ends the command (it says
    nothing of a trace, which is not left out of a run for it)."""


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec filesystem for `url`, and the path in it; one line where the
    client is not installed or cannot start."""
    scheme = url.split(":", 1)[0]
    _quiet_clients()
    try:
        import fsspec  # type: ignore[import-untyped]

        return fsspec.core.url_to_fs(url)
    except ImportError:
        package = _PACKAGES.get(scheme, "fsspec")
        extra = "gcs" if package == "gcsfs" else "s3"
        raise TpumemError(
            f"{url}: object storage at {scheme}:// needs {package} (pip install 'tpumem[{extra}]')"
        ) from None
    except Exception as error:  # (a client that cannot start: no credentials, a bad URL)
        raise TpumemError(f"{url}: {why(error)}") from None


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
