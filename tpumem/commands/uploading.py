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
from tpumem.outputs import (
    TRACE_SUFFIX,
    literal_name,
    literal_text,
    placeholders,
    remote_url,
    summary_of,
    summary_url_of,
)
from tpumem.storage.uploads import (
    check_bucket,
    forget_copy,
    local_copy,
    put,
    refuse_existing,
    remove,
    url_of_copy,
)


def written_here(
    output: Path | None, force: bool, directory: bool = False, fills: bool = True
) -> Path | None:
    """Where an output given as `-o` is written on this machine: itself, or for a
    URL its copy here. Before any work, one line for what would fail when the
    work ends: no client, no bucket, a name a run there is not read by (a trace's
    must end in .tpumem; `directory`: a run's, for --follow, named as written), an
    object at a name without placeholders (`fills`: the process fills them in; a
    doubled brace is one brace in a name without)."""
    url = None if output is None else remote_url(output)
    if url is None:
        return output
    local = local_copy(url)
    if not directory and not url.endswith(TRACE_SUFFIX):
        raise TpumemError(
            f"{url}: a trace's name there ends in {TRACE_SUFFIX}, which a run there is read "
            "by (--follow writes a run's directory)"
        )
    check_bucket(url)
    as_written = directory or not fills  # (no placeholders to fill, nor braces to undouble)
    if as_written or not placeholders(url):  # (else checked when it is put)
        literal = local if as_written else literal_name(local)
        refuse_existing(url if as_written else literal_text(url), force, "-o another name")
        try:
            (literal if directory else literal.parent).mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise TpumemError(f"{literal.parent}: cannot make the directory: {error}") from None
    return local


def upload_traces(traces: list[Path], force: bool, say: bool = True) -> list[str]:
    """Each trace written by `written_here`'s rule put where it is bound, then its
    summary, and its copy here removed; a line on stderr for each (`say`). A line
    for each not put (or put without its summary), which names where its copy
    stays."""
    from tpumem.report.escapes import visible

    failed = []
    for trace in traces:
        url = url_of_copy(trace)
        if url is None:
            continue
        try:
            upload_trace(trace, url, force)
        except TpumemError as error:
            failed.append(f"{visible(str(error))}; its copy stays at {visible(str(trace))}")
            continue
        forget_copy(summary_of(trace))
        forget_copy(trace)
        if say:
            print(f"tpumem: trace put at {visible(url)}", file=sys.stderr)
    return failed


def upload_trace(trace: Path, url: str, force: bool) -> None:
    """The trace put at `url`, then its summary beside it, tagged with what storage
    says of the trace where the summary stands for the trace that was put (an
    older summary there taken away where it has none)."""
    from tpumem.reading.summary_files import read_summary, tag_summary

    tag, size = put(trace, url, force)
    summary, summary_url = summary_of(trace), summary_url_of(url)
    if not summary.exists():
        try:
            remove(summary_url)  # (an older trace's there would stand for one that is gone)
        except TpumemError as error:
            raise TpumemError(
                f"{url}: put, but an older summary there could not be removed ({error})"
            ) from None
        return
    # (where it cannot be tagged, the summary stands as it is: the trace's end is
    # read where the run is)
    stands = not isinstance(read_summary(trace), str)
    if tag is not None and size == trace.stat().st_size and stands:
        with suppress(OSError, ValueError):
            tag_summary(trace, tag)
    try:
        put(summary, summary_url, force=True)
    except TpumemError as error:
        raise TpumemError(
            f"{url}: put, but not its summary ({error}); a run there reads the trace's end"
        ) from None


def check_logdir(logdir: Path | None) -> None:
    """Before any work, one line where a logdir bound for object storage could not
    be written there (no client, no bucket)."""
    url = None if logdir is None else remote_url(logdir)
    if url is not None:
        check_bucket(url)


@contextmanager
def logdir_written(logdir: Path, force: bool) -> Iterator[tuple[Path, Callable[[Path], str]]]:
    """A TensorBoard logdir to export into: itself, or for a URL a scratch directory
    whose files are put there when the block ends (refused before any is put where
    one is there already, unless `force`); with what to call a file written into it."""
    url = remote_url(logdir)
    if url is None:
        yield logdir, str
        return
    check_logdir(logdir)
    with tempfile.TemporaryDirectory(prefix="tpumem-logdir-") as scratch:
        root = Path(scratch)

        def named(path: Path) -> str:
            return f"{url.rstrip('/')}/{path.relative_to(root).as_posix()}"

        yield root, named
        files = sorted(p for p in root.rglob("*") if p.is_file())
        for file in files:
            refuse_existing(named(file), force, instead="another --run")
        for file in files:
            put(file, named(file), force=True)
