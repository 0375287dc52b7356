"""Traces and TensorBoard logdirs that `profile`, `import` and `export` write to
object storage: written on this machine, then put there (storage/uploads.py),
each trace's summary after it, tagged with what storage says of the trace, so
that a run read there knows its summaries stand without reading the traces."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from tpumem.errors import TpumemError
from tpumem.outputs import placeholders, remote_url, summary_of
from tpumem.storage.uploads import local_copy, put, refuse_existing, remove, url_of_copy


def written_here(output: Path | None, force: bool) -> Path | None:
    """Where an output given as `-o` is written on this machine: itself, or for a
    URL its local copy (an object already at a URL with no placeholders is refused
    here, before any work)."""
    url = None if output is None else remote_url(output)
    if url is None:
        return output
    local = local_copy(url)
    if not placeholders(url):  # (a name the process fills in: its directories made there)
        refuse_existing(url, force)
        try:
            local.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise TpumemError(f"{local.parent}: cannot make the directory: {error}") from None
    return local


def upload_traces(traces: list[Path], force: bool, say: bool = True) -> list[str]:
    """Each trace written by `written_here`'s rule put where it is bound, then its
    summary, a line on stderr for each (`say`); a line for each not uploaded,
    which names where its local copy stays."""
    failed = []
    for trace in traces:
        url = url_of_copy(trace)
        if url is None:
            continue
        try:
            upload_trace(trace, url, force)
        except TpumemError as error:
            failed.append(f"{error}; the trace stays at {trace}")
            continue
        if say:
            print(f"tpumem: uploaded {trace} to {url}", file=sys.stderr)
    return failed


def upload_trace(trace: Path, url: str, force: bool) -> None:
    """The trace put at `url`, then its summary beside it, tagged with what storage
    says of the trace (an older summary there taken away where it has none)."""
    from tpumem.reading.summary_files import tag_summary

    tag = put(trace, url, force)
    summary, summary_url = summary_of(trace), str(summary_of(Path(url)))
    summary_url = remote_url(summary_url) or summary_url
    if not summary.exists():
        remove(summary_url)  # (an older trace's there would stand for one that is gone)
        return
    if tag is not None:
        # (where it cannot be, the summary stands as it is: the trace's end is read
        # where the run is)
        with suppress(OSError, ValueError):
            tag_summary(trace, tag)
    put(summary, summary_url, force=True)


@contextmanager
def logdir_written(logdir: Path, force: bool) -> Iterator[tuple[Path, Callable[[Path], str]]]:
    """A TensorBoard logdir to export into: itself, or for a URL a scratch directory
    whose files are put there when the block ends (refused before any is put where
    one is there already, unless `force`); with what to call a file written into it."""
    url = remote_url(logdir)
    if url is None:
        yield logdir, str
        return
    with tempfile.TemporaryDirectory(prefix="tpumem-logdir-") as scratch:
        root = Path(scratch)

        def named(path: Path) -> str:
            return f"{url.rstrip('/')}/{path.relative_to(root).as_posix()}"

        yield root, named
        files = sorted(p for p in root.rglob("*") if p.is_file())
        for file in files:
            refuse_existing(named(file), force)
        for file in files:
            put(file, named(file), force=True)
