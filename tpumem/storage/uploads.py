"""What tpumem writes to object storage: a file is written on this machine first
(a trace as its run goes, so that a crash or a refused upload still leaves it
there) and put where the user asked once it is whole. A trace bound for
`gs://bucket/run/vm-1.tpumem` is written to `<cache>/tpumem/uploads/gs/bucket/run/
vm-1.tpumem` (`<cache>`: $XDG_CACHE_HOME, else ~/.cache), one rule both ways."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from tpumem.errors import TpumemError
from tpumem.outputs import remote_url
from tpumem.storage.client import StorageError, content_tag, filesystem, said


def uploads_root() -> Path:
    """Where what is bound for object storage is written first."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "tpumem" / "uploads"


def local_copy(url: str) -> Path:
    """Where the file bound for `url` is written on this machine (placeholders and
    all); one line for a URL with no object's name or with `..` in it."""
    scheme, _, rest = url.partition("://")
    parts = PurePosixPath(rest).parts
    if len(parts) < 2 or any(part in ("..", ".") for part in rest.split("/")):
        raise TpumemError(f"{url}: not a bucket and an object's name in it")
    return uploads_root() / ("gs" if scheme == "gcs" else scheme) / Path(*parts)


def url_of_copy(local: Path) -> str | None:
    """The URL a file written by `local_copy`'s rule is bound for; None for one
    outside it."""
    try:
        parts = local.resolve().relative_to(uploads_root().resolve()).parts
    except ValueError:
        return None
    return f"{parts[0]}://{'/'.join(parts[1:])}" if len(parts) > 2 else None


def is_remote(path: Path | str | None) -> bool:
    return path is not None and remote_url(path) is not None


def refuse_existing(url: str, force: bool) -> None:
    """One line, before any work, where an object is at `url` and `force` is not
    given: nothing kept there is replaced silently."""
    if force:
        return
    fs, key = filesystem(url)
    with said(url):
        there = fs.exists(key)
    if there:
        raise StorageError(f"{url}: exists; use --force to replace it, or give another name")


def put(local: Path, url: str, force: bool) -> str | None:
    """Puts the file at `url` (an existing object only with `force`); what storage
    then says of its content (content_tag), where it says."""
    fs, key = filesystem(url)
    with said(url):
        if not force and fs.exists(key):
            raise StorageError(f"{url}: exists; not replaced (--force replaces)")
        fs.put_file(str(local), key)
        return content_tag(fs.info(key))


def remove(url: str) -> None:
    """The object at `url` gone, where there is one."""
    fs, key = filesystem(url)
    with said(url):
        if fs.exists(key):
            fs.rm_file(key)
