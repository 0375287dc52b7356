"""A process's summary, kept beside its trace: `rank0.tpumem` has
`rank0.tpumem.summary.json`. It is written where the recording ends (by `tpumem
profile`, `import`, `track`), so that a run of many hosts is read from its
summaries, a few kilobytes each, and not from every host's trace.

A summary stands for its trace only while the trace is the one it was made from:
it records the trace's size, and one whose trace has another size (cut, written
on, replaced) is not used. Nor is one of a newer version, or one that cannot be
read: the trace is summarised where it is read instead, and the report says why.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tpumem.analysis.processes import ProcessSummary
from tpumem.outputs import summary_of
from tpumem.reading.plain_json import Unreadable, from_plain, to_plain

if TYPE_CHECKING:
    from tpumem.analysis.run_figures import RunAnalysis

FORMAT = "tpumem-summary"
VERSION = 1
_MAX_BYTES = 16 * 1024 * 1024  # a summary is kilobytes; more is not one


def summary_text(summary: ProcessSummary, trace_bytes: int) -> str:
    """The summary as it is kept: versioned, with the size of the trace it stands for."""
    plain = to_plain(replace(summary, path=Path(summary.path).name, findings=()))
    return json.dumps(
        {"format": FORMAT, "version": VERSION, "trace_bytes": trace_bytes, "summary": plain},
        separators=(",", ":"),
        allow_nan=False,
    )


def write_summary(trace: Path, summary: ProcessSummary) -> Path:
    """Writes the trace's summary beside it (whole or not at all: a reader never
    sees half of one); OSError where it cannot."""
    target = summary_of(trace)
    text = summary_text(summary, trace.stat().st_size)
    scratch = target.with_name(f".{target.name}.{os.getpid()}")
    try:
        scratch.write_text(text, encoding="utf-8")
        os.replace(scratch, target)
    finally:
        scratch.unlink(missing_ok=True)
    return target


def summary_from_text(text: str, trace: Path, trace_bytes: int) -> ProcessSummary | str:
    """The summary `text` holds for the trace at `trace` (of `trace_bytes`), or why it
    does not stand for it."""
    try:
        kept = json.loads(text)
    except (ValueError, RecursionError):
        return "its summary is not JSON"
    if not isinstance(kept, dict) or kept.get("format") != FORMAT:
        return "its summary is not a tpumem summary"
    version = kept.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return f"its summary's version {version!r} is not one tpumem knows"
    if version > VERSION:
        return f"its summary is of version {version}, newer than this tpumem reads ({VERSION})"
    if kept.get("trace_bytes") != trace_bytes:
        made_for = kept.get("trace_bytes")
        return (
            f"the trace has changed since its summary was made ({made_for!r} bytes then, "
            f"{trace_bytes:,} now): the trace wins"
        )
    try:
        summary = from_plain(ProcessSummary, kept.get("summary"))
    except Unreadable as error:
        return f"its summary does not read as one ({error})"
    return replace(summary, path=str(trace), made_from="summary")


def read_summary(trace: Path) -> ProcessSummary | str:
    """The summary beside the trace, or why there is none to use."""
    where = summary_of(trace)
    try:
        trace_bytes = trace.stat().st_size
        with open(where, "rb") as file:
            raw = file.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return "no summary beside it (a recording that did not end, or an older one)"
    except OSError as error:
        return f"its summary cannot be read ({error.strerror or error})"
    if len(raw) > _MAX_BYTES:
        return "its summary is too large to be one"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return "its summary is not UTF-8 text"
    return summary_from_text(text, trace, trace_bytes)


def summarise_beside(trace: Path, analysis: RunAnalysis | None = None) -> str | None:
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
    return None
