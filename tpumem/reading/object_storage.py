"""Runs kept in object storage (`gs://bucket/run/`, `s3://bucket/run/`), read
through fsspec (gcsfs, s3fs: the `gcs` and `s3` extras), credentials from the
environment as those libraries take them.

Only what a command needs travels: each trace's summary, the last 4 KiB of each
trace (what its summary knows it by, with its size from the listing), and in full
only the traces that are analysed (the busiest, and those with no summary that
stands). The traces are stand-ins in a scratch directory until then: files of
their size, holes but for their end (`Fetched.fetch` brings one whole).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpumem.errors import TpumemError
from tpumem.outputs import summary_of
from tpumem.reading.summary_files import END_BYTES, MAX_SUMMARY_BYTES

_PACKAGES = {"gs": "gcsfs", "gcs": "gcsfs", "s3": "s3fs"}


class StorageError(TpumemError):
    """What object storage would not give: it ends the command (it says nothing of
    the trace, which is not left out of a run for it)."""


@dataclass
class Fetched:
    """A run's traces in object storage as local stand-ins, each brought whole
    when it is first read in full."""

    traces: list[Path]
    _fs: Any
    _remote: dict[Path, str] = field(default_factory=dict)  # each stand-in's object
    _brought: set[Path] = field(default_factory=set)  # the stand-ins made whole

    def fetch(self, trace: Path) -> None:
        """The trace at `trace` whole (a no-op for one brought already, or local)."""
        if trace not in self._remote or trace in self._brought:
            return
        remote = self._remote[trace]
        with _said(self._fs.unstrip_protocol(remote)):
            self._fs.get_file(remote, str(trace))
        self._brought.add(trace)  # (only once it is whole)

    def url_of(self, trace: Path) -> str | None:
        """Where a stand-in's trace is kept, as a report names it."""
        remote = self._remote.get(trace)
        return None if remote is None else self._fs.unstrip_protocol(remote)


def fetched_run(url: str, scratch: Path) -> Fetched:
    """The traces at `url` (a run's directory, or one trace) as stand-ins in
    `scratch`, with their summaries; one line for what cannot be read."""
    fs, root = _filesystem(url)
    with _said(url):
        listed = fs.ls(root, detail=True) if fs.isdir(root) else [fs.info(root)]
    files = {
        entry["name"]: int(entry.get("size") or 0)
        for entry in listed
        if entry.get("type", "file") == "file"  # (not a "directory" named x.tpumem)
    }
    traces = sorted(name for name in files if name.endswith(".tpumem"))
    if not traces:
        raise TpumemError(f"{url}: no traces (.tpumem files) there")
    fetched = Fetched([], fs)
    local = [scratch / Path(name).name for name in traces]
    summaries = {name: str(summary_of(Path(name))) for name in traces}
    wanted = [summaries[name] for name in traces if summaries[name] in files]
    with _said(url):
        # Ranges, not `cat`: no name is read as a pattern, and no summary is read
        # past the size one can have (summary_files.py refuses it then).
        kept = fs.cat_ranges(wanted, [0] * len(wanted), [MAX_SUMMARY_BYTES + 1] * len(wanted))
        ends = fs.cat_ranges(
            traces,
            [max(0, files[name] - END_BYTES) for name in traces],
            [files[name] for name in traces],
        )
    for name, got in [*zip(wanted, kept, strict=True), *zip(traces, ends, strict=True)]:
        if isinstance(got, BaseException):
            raise StorageError(f"{fs.unstrip_protocol(name)}: {_why(got)}")
    by_name = dict(zip(wanted, kept, strict=True))
    with _scratch_written(scratch):
        for name, path, end in zip(traces, local, ends, strict=True):
            _stand_in(path, files[name], end)
            if summaries[name] in by_name:
                summary_of(path).write_bytes(by_name[summaries[name]])
            fetched._remote[path] = name
            fetched.traces.append(path)
    return fetched


@contextmanager
def _scratch_written(where: Path) -> Iterator[None]:
    """A full scratch disk as what it is, not as the command's output failing."""
    try:
        yield
    except OSError as error:
        raise StorageError(
            f"cannot keep what was read from object storage in {where} "
            f"({error.strerror or error}; TMPDIR chooses the directory)"
        ) from None


def _stand_in(path: Path, size: int, end: bytes) -> None:
    """A file of the trace's size, its end as the trace's, holes before (no disk)."""
    with open(path, "wb") as file:
        file.truncate(size)
        file.seek(max(0, size - len(end)))
        file.write(end)


def _filesystem(url: str) -> tuple[Any, str]:
    scheme = url.split(":", 1)[0]
    try:
        import fsspec  # type: ignore[import-untyped]

        return fsspec.core.url_to_fs(url)
    except ImportError:
        package = _PACKAGES.get(scheme, "fsspec")
        extra = "gcs" if package == "gcsfs" else "s3"
        raise TpumemError(
            f"{url}: reading {scheme}:// needs {package} (pip install 'tpumem[{extra}]')"
        ) from None
    except Exception as error:  # (a client that cannot start: no credentials, a bad URL)
        raise TpumemError(f"{url}: {_why(error)}") from None


@contextmanager
def _said(where: str) -> Iterator[None]:
    """A storage client's errors as one line: no bucket, no permission, no
    credentials, the server out of reach."""
    try:
        yield
    except TpumemError:
        raise
    except Exception as error:  # (each client has its own kinds of error)
        raise StorageError(f"{where}: {_why(error)}") from None


def _why(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    lowered = text.lower()
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left to keep it on this machine (TMPDIR chooses where)"
    if isinstance(error, FileNotFoundError) or "does not exist" in lowered:
        return "no such bucket or object"
    if "credential" in lowered or "anonymous caller" in lowered or "401" in lowered:
        return f"no credentials to read it ({text[:200]})"
    if isinstance(error, PermissionError) or "forbidden" in lowered or "403" in lowered:
        return "permission denied (the credentials in the environment may not read it)"
    return f"{type(error).__name__}: {text[:200]}"
