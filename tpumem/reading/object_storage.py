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

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tpumem.errors import TpumemError
from tpumem.outputs import SUMMARY_SUFFIX, summary_of

# A URL as a command's argument gives it; a Path keeps one slash of the two.
_URL = re.compile(r"^(gs|gcs|s3):/+(.+)$")
_PACKAGES = {"gs": "gcsfs", "gcs": "gcsfs", "s3": "s3fs"}
_END_BYTES = 4096  # (summary_files.py digests as much of a trace's end)


def remote_url(path: Path | str) -> str | None:
    """The object storage URL `path` stands for, or None for a local path."""
    found = _URL.match(str(path))
    return f"{found.group(1)}://{found.group(2)}" if found else None


@dataclass
class Fetched:
    """A run's traces in object storage as local stand-ins, each brought whole
    when it is first read in full."""

    url: str
    traces: list[Path]
    _remote: dict[Path, str] = field(default_factory=dict)  # stand-ins not yet brought
    _fs: Any = None

    def fetch(self, trace: Path) -> None:
        """The trace at `trace` whole (a no-op for one brought already, or local)."""
        remote = self._remote.pop(trace, None)
        if remote is None:
            return
        with _said(remote):
            self._fs.get_file(remote, str(trace))


def fetched_run(url: str, scratch: Path) -> Fetched:
    """The traces at `url` (a run's directory, or one trace) as stand-ins in
    `scratch`, with their summaries; one line for what cannot be read."""
    fs, root = _filesystem(url)
    with _said(url):
        listed = fs.ls(root, detail=True) if fs.isdir(root) else [fs.info(root)]
    files = {entry["name"]: int(entry.get("size") or 0) for entry in listed}
    traces = sorted(name for name in files if name.endswith(".tpumem"))
    if not traces:
        raise TpumemError(f"{url}: no traces (.tpumem files) there")
    fetched = Fetched(url, [], _fs=fs)
    local = [scratch / Path(name).name for name in traces]
    summaries = [name + SUMMARY_SUFFIX[len(".tpumem") :] for name in traces]
    wanted = [name for name in summaries if name in files]
    with _said(url):
        kept = fs.cat(wanted, on_error="omit") if wanted else {}
        ends = fs.cat_ranges(
            traces,
            [max(0, files[name] - _END_BYTES) for name in traces],
            [files[name] for name in traces],
        )
    for name, path, end, summary in zip(traces, local, ends, summaries, strict=True):
        _stand_in(path, files[name], end)
        if summary in kept:
            summary_of(path).write_bytes(kept[summary])
        fetched._remote[path] = name
        fetched.traces.append(path)
    return fetched


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
        raise TpumemError(
            f"{url}: reading {scheme}:// needs {package} (pip install {package})"
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
        raise TpumemError(f"{where}: {_why(error)}") from None


def _why(error: BaseException) -> str:
    if isinstance(error, FileNotFoundError):
        return "no such bucket or object"
    if isinstance(error, PermissionError):
        return "permission denied (the credentials in the environment may not read it)"
    text = " ".join(str(error).split()) or type(error).__name__
    if "credential" in text.lower():
        return f"no credentials to read it ({text[:200]})"
    return f"{type(error).__name__}: {text[:200]}"


def stand_ins(paths: Iterable[Path]) -> bool:
    """Whether any of `paths` names object storage."""
    return any(remote_url(path) is not None for path in paths)
