"""What tpumem writes to object storage: a file is written on this machine first
(a trace as its run goes, so that a crash or a refused upload still leaves it
there) and put where the user asked once it is whole; the copy here is removed
once it and its summary are there. A trace bound for `gs://bucket/run/vm-1.tpumem`
is written to `<cache>/tpumem/uploads/<run>/gs/bucket/run/vm-1.tpumem` (`<cache>`:
$XDG_CACHE_HOME, else ~/.cache; `<run>`: when and by which process, so that a copy
an earlier run could not put is never in a later run's way), one rule both ways."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path, PurePosixPath

from tpumem.errors import TpumemError
from tpumem.outputs import TRACE_SUFFIX
from tpumem.storage.client import StorageError, content_tag, filesystem, said

_ROOT = ("tpumem", "uploads")


def uploads_root() -> Path:
    """Where what is bound for object storage is written first."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):  # (the XDG rule: a relative one is ignored)
        try:
            cache = str(Path.home() / ".cache")
        except RuntimeError:  # (no home directory known)
            raise TpumemError(
                "no home directory to write the copy of what goes to object storage in: "
                "set XDG_CACHE_HOME"
            ) from None
    root = Path(cache).joinpath(*_ROOT)
    if "{" in str(root) or "}" in str(root):
        # (a trace's name there is a pattern its process fills in: a brace of the
        # directory's own would be taken for a placeholder)
        raise TpumemError(
            f"{root}: braces in the directory the copies of what goes to object storage "
            "are written in; set XDG_CACHE_HOME to one without"
        )
    return root


def local_copy(url: str) -> Path:
    """Where the file bound for `url` is written on this machine by this process
    (placeholders and all); one line for a URL with no object's name or with `..`
    in it."""
    scheme, _, rest = url.partition("://")
    parts = rest.split("/")
    if len(parts) < 2 or not all(parts) or any(part in ("..", ".") for part in parts):
        raise TpumemError(f"{url}: give a bucket and an object's name: {scheme}://BUCKET/NAME")
    run = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    return uploads_root() / run / ("gs" if scheme == "gcs" else scheme) / Path(*parts)


def url_of_copy(local: Path) -> str | None:
    """The URL a file written by `local_copy`'s rule is bound for; None for one
    outside it."""
    try:
        parts = local.resolve().relative_to(uploads_root().resolve()).parts
    except (ValueError, TpumemError):
        return None
    return f"{parts[1]}://{'/'.join(parts[2:])}" if len(parts) > 3 else None


def forget_copy(local: Path) -> None:
    """The copy here gone, once what it was bound for holds it, with the
    directories of its run left empty."""
    local.unlink(missing_ok=True)
    tidy(local)


def run_directory(local: Path) -> Path:
    """The directory of the run that wrote `local` here (for a line on where what
    was not put stays)."""
    return _run_of(local) or local.parent


def _run_of(local: Path) -> Path | None:
    """The run's directory of a copy written by `local_copy`'s rule; None for a
    file outside it."""
    root = uploads_root()
    try:
        return root / local.relative_to(root).parts[0]
    except (ValueError, IndexError):
        return None


def tidy(local: Path) -> None:
    """The directories of the run that wrote `local` (placeholders and all) gone
    where they hold nothing: a run that put everything, or was refused, leaves
    none behind."""
    run = _run_of(local)
    if run is None:
        return
    for directory, _, _ in list(os.walk(run, topdown=False)):  # (the deepest first)
        with contextlib.suppress(OSError):  # (not empty: a copy is still there)
            os.rmdir(directory)


def check_bucket(url: str) -> None:
    """One line, before any work, where the client is missing, cannot start, or
    finds no bucket for `url` (a run is not made to find it out when it ends)."""
    fs, key = filesystem(url)
    bucket = PurePosixPath(key).parts[0]
    try:
        with said(url):
            there = fs.exists(bucket)
    except StorageError as error:
        if "permission denied" in str(error):
            return  # (credentials that may write but not look: the put will tell)
        raise
    if not there:
        raise StorageError(f"{url}: no such bucket (or the credentials may not see it)")


def refuse_existing(url: str, force: bool, instead: str = "give another name") -> None:
    """One line, before any work, where an object is at `url` (or, for a directory,
    a trace below it) and `force` is not given: nothing kept there is replaced
    silently (`instead`: the other way out)."""
    if force:
        return
    fs, key = filesystem(url)
    with said(url):
        if fs.isdir(key):
            if any(name.endswith(TRACE_SUFFIX) for name in fs.ls(key, detail=False)):
                raise StorageError(
                    f"{url}: holds traces already; use --force to write into it (the "
                    f"traces of other names there stay), or {instead}"
                )
            return
        there = fs.exists(key)
    if there:
        raise StorageError(f"{url}: exists; use --force to replace it, or {instead}")


def put(local: Path, url: str, force: bool) -> tuple[str | None, int]:
    """Puts the file at `url` (an existing object only with `force`); what storage
    then says of it: its content (content_tag, where it says) and its size."""
    fs, key = filesystem(url)
    with said(url):
        if not force and fs.exists(key):
            raise StorageError(f"{url}: exists; not replaced (put the copy by hand, or --force)")
        fs.put_file(str(local), key)
        info = fs.info(key)
    return content_tag(info), int(info.get("size") or 0)


def remove(url: str) -> None:
    """The object at `url` gone, where there is one."""
    fs, key = filesystem(url)
    with said(url):
        if fs.exists(key):
            fs.rm_file(key)
