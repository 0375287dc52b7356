"""A process's summary, kept beside its trace: `rank0.tpumem` has
`rank0.tpumem.summary.json`. It is written where the recording ends (by `tpumem
profile`, `import`, `track`), so that a run of many hosts is read from its
summaries, a few kilobytes each, and not from every host's trace.

A summary stands for its trace only while the trace is the one it was made from:
it records the trace's size and a digest of its end, and one whose trace differs
in either (cut, written on, replaced) is not used. Nor is one of a newer format,
one made by another version of tpumem's analysis, or one that cannot be read (a
link, more than a summary weighs): the trace is summarised where it is read
instead, and the report says why. That evidence is what anyone can compute:
`check` judges a run by its traces unless asked to trust the summaries.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from tpumem import __version__
from tpumem.analysis.processes import MAX_PROCESSES, ProcessSummary
from tpumem.outputs import is_summary, summary_of
from tpumem.reading.plain_json import Unreadable, from_plain, to_plain
from tpumem.regular_files import NotRegular, read_regular

if TYPE_CHECKING:
    from tpumem.analysis.trace_figures import TraceAnalysis

FORMAT = "tpumem-summary"
VERSION = 1
# A summary is kilobytes: 15 KB for a process of one device (its line for the
# page, 200 points, is most of it), a few more for each further device. Larger is
# not one; its trace is read instead.
MAX_SUMMARY_BYTES = 1024 * 1024
END_BYTES = 4096  # of the trace, digested: its last batch and the stream's end
# Why a trace has no summary to read: not something gone wrong where none is
# expected (a run followed or imported here, read before its summaries are made).
MISSING = "no summary beside it (a recording that did not end, or an older one)"
# Where tpumem uploaded the trace and its summary: what object storage's listing
# says of the trace's content (storage/client.py's content_tag), by which a reader
# there knows the summary stands without reading the trace's end.
TAG_KEY = "trace_tag"
# The tpumem whose analysis made the summary's figures: one of another version is
# made again from its trace, by this one's (the figures' rules change between
# versions; the format's version says only how the file is laid out).
ANALYSIS_KEY = "tpumem_version"
# What a summary keeps only where it is read (the caller's findings, where it was
# made): a file that holds them is not one tpumem wrote.
_NOT_KEPT = ("findings", "made_from")


def trace_end(trace: BinaryIO, size: int) -> str:
    """A digest of the trace's last bytes: with its size, what tells the trace a
    summary was made from from another put in its place (another run's ends in
    other times and figures)."""
    trace.seek(max(0, size - END_BYTES))
    return hashlib.sha256(trace.read(END_BYTES)).hexdigest()[:32]


def trace_identity(kept: dict[str, object], size: int) -> tuple[int, str] | None:
    """(size, end digest) of the trace a summary's file stands for, where its size
    is `size`."""
    end = kept.get("trace_end")
    if kept.get("trace_bytes") != size or not isinstance(end, str):
        return None
    return size, end


def tag_summary(trace: Path, tag: str) -> None:
    """Records in the trace's summary what storage says of the trace's content
    where it was uploaded (TAG_KEY); OSError or ValueError where it cannot."""
    target = summary_of(trace)
    kept = json.loads(target.read_text(encoding="utf-8"))
    kept[TAG_KEY] = tag
    _write_whole(target, json.dumps(kept, separators=(",", ":"), allow_nan=False))


def _identity(trace: Path) -> tuple[int, str]:
    """(size, digest of the end) of the trace as it is now."""
    with open(trace, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        return size, trace_end(file, size)


def summary_text(summary: ProcessSummary, trace_bytes: int, end: str) -> str:
    """The summary as it is kept: versioned, with the size and end of the trace it
    stands for."""
    plain = to_plain(replace(summary, path=Path(summary.path).name))
    for name in _NOT_KEPT:
        del plain[name]
    return json.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            ANALYSIS_KEY: __version__,
            "trace_bytes": trace_bytes,
            "trace_end": end,
            "summary": plain,
        },
        separators=(",", ":"),
        allow_nan=False,
    )


def write_summary(trace: Path, summary: ProcessSummary) -> Path:
    """Writes the trace's summary beside it (whole or not at all: a reader never
    sees half of one); OSError where it cannot."""
    target = summary_of(trace)
    _write_whole(target, summary_text(summary, *_identity(trace)))
    return target


def _write_whole(target: Path, text: str) -> None:
    """A summary written in full, then renamed onto `target`; FileExistsError where
    a file there is not a summary of tpumem's (`results.summary.json` beside a trace
    named `results`: the user's, left as it is)."""
    if os.path.lexists(target) and not is_summary(target):
        raise FileExistsError(
            errno.EEXIST, f"{target.name} is there and is not a summary of tpumem's; left as it is"
        )
    scratch = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        scratch.write_text(text, encoding="utf-8")
        os.replace(scratch, target)
    finally:
        scratch.unlink(missing_ok=True)


def summary_from_text(
    text: str, trace: Path, trace_bytes: int, trace_end: str
) -> ProcessSummary | str:
    """The summary `text` holds for the trace at `trace` (of `trace_bytes`, ending
    in bytes whose digest is `trace_end`), or why it does not stand for it."""
    try:
        kept = json.loads(text)
    except (ValueError, RecursionError):
        return "its summary is not JSON"
    if not isinstance(kept, dict) or kept.get("format") != FORMAT:
        return "its summary is not a tpumem summary"
    version = kept.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return "its summary's version is not one tpumem knows"
    if version > VERSION:
        return f"its summary is of version {version}, newer than this tpumem reads ({VERSION})"
    made_by = kept.get(ANALYSIS_KEY)
    if made_by != __version__:
        return (
            f"its summary was made by tpumem {made_by}'s analysis, not this one's ({__version__})"
            if isinstance(made_by, str) and len(made_by) <= 40
            else "its summary does not say which tpumem's analysis made it"
        )
    if kept.get("trace_bytes") != trace_bytes or kept.get("trace_end") != trace_end:
        return "the trace has changed since its summary was made: the trace wins"
    plain = kept.get("summary")
    if isinstance(plain, dict) and not set(plain).isdisjoint(_NOT_KEPT):
        return "its summary holds what no summary holds (findings, where it was made)"
    try:
        summary = from_plain(ProcessSummary, plain)
    except Unreadable as error:
        return f"its summary does not read as one ({error})"
    insane = _insane(summary)
    if insane is not None:
        return f"its summary does not read as one ({insane})"
    return replace(summary, path=str(trace), made_from="summary")


def _insane(summary: ProcessSummary) -> str | None:
    """What no recording gives, where a summary says it: it is not used."""
    sizes = [summary.peak_bytes, summary.pool_bytes, summary.devices, summary.steps]
    sizes += [s for d in summary.device_summaries for s in (d.peak_bytes, d.pool_bytes)]
    if any(size is not None and size < 0 for size in sizes):
        return "a negative size"
    shares = [summary.fragmentation_at_peak]
    shares += [d.fragmentation_at_peak for d in summary.device_summaries]
    if any(share is not None and not 0 <= share <= 1 for share in shares):
        return "fragmentation outside 0 to 1"
    if summary.count is not None and not 0 < summary.count <= MAX_PROCESSES:
        return f"a run of {summary.count!r} processes"
    if summary.index is not None and not 0 <= summary.index < MAX_PROCESSES:
        return f"rank {summary.index!r}"
    return None


def read_summary(trace: Path, identity: tuple[int, str] | None = None) -> ProcessSummary | str:
    """The summary beside the trace, or why there is none to use. `identity`: the
    trace's (size, end digest) where known without reading it (object storage
    vouches for it)."""
    try:
        # The file its recording wrote: not a link (which may point anywhere), a
        # FIFO or a device to wait on, nor more than a summary weighs.
        raw = read_regular(summary_of(trace), MAX_SUMMARY_BYTES)
    except FileNotFoundError:
        return MISSING
    except NotRegular as why:
        return f"its summary is {why}: not read"
    except OSError as error:
        return f"its summary cannot be read ({error.strerror or error})"
    try:
        if identity is None:
            identity = _identity(trace)
    except OSError as error:
        return f"its trace cannot be read ({error.strerror or error})"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "its summary is not UTF-8 text"
    return summary_from_text(text, trace, *identity)


def summarise_beside(trace: Path, analysis: TraceAnalysis | None = None) -> str | None:
    """Writes the trace's summary beside it, from `analysis` where the caller made
    one with SERIES_POINTS (else analysed here); a line on why it could not, for
    the caller to say: the trace stands whatever happens here."""
    from tpumem.analysis.processes import SERIES_POINTS, summarize
    from tpumem.errors import TpumemError
    from tpumem.reading.analyses import analysed

    try:
        if analysis is None:
            analysis = analysed(trace, series_points=SERIES_POINTS, page=False)
        write_summary(trace, summarize(analysis))
    except TpumemError as error:
        return f"no summary written beside {trace}: {error}"
    except OSError as error:
        return f"no summary written beside {trace}: {error.strerror or error}"
    except Exception as error:  # (a fault of the analysis: the recording stands, said)
        return f"no summary written beside {trace}: {type(error).__name__}: {error}"
    return None


@contextmanager
def summary_kept(trace: Path) -> Iterator[None]:
    """A trace that tpumem appends to in the block (its TPU compiles, what `fit`
    set): where its recording's summary stood for it before, it is made again
    after, so that it stands for the trace as it now is (a run's report would
    read the trace in full else). A line on stderr where it cannot be."""
    import sys

    stood = isinstance(read_summary(trace), ProcessSummary)
    before = _identity(trace) if stood else None
    yield
    try:
        if before is None or _identity(trace) == before:
            return
    except OSError:
        return  # (gone: nothing to stand for)
    unwritten = summarise_beside(trace)
    if unwritten is not None:
        print(f"tpumem: {unwritten}", file=sys.stderr)
