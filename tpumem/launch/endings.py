"""How a run ended, recorded from outside by `tpumem profile` in a trace whose
process could not: it was killed, or ended past the runner (os._exit).

A trace its writer had opened gets a metadata row and the end-of-stream marker
appended (trace/amend.py); one the profiled process never opened (it was killed
as its framework's import began, before the header was on disk) gets the header
written here, with the ending in it: either way the trace loads and says how the
run ended.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpumem.trace.amend import append_metadata
from tpumem.trace.metadata import ExitStatus
from tpumem.trace.records import parse_object
from tpumem.trace.schema import END_OF_STREAM, METADATA_KEY

if TYPE_CHECKING:
    from tpumem.launch.tree import TreeEnd

_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


def exit_status(returncode: int, memory: ExitStatus | None = None) -> tuple[ExitStatus, str]:
    """The ending of a process that ended with `returncode` (-N: signal N), and
    how it is said ("was killed by SIGTERM"). `memory`: what was seen of a killed
    process's memory (the ExitStatus fields for a kill)."""
    if returncode < 0:
        number = -returncode
        name = signal_name(number)
        how = "was interrupted (SIGINT)" if number == signal.SIGINT else f"was killed by {name}"
        return replace(memory or ExitStatus(), signal=number, signal_name=name), how
    return ExitStatus(code=returncode), f"ended with status {returncode}"


def signal_name(number: int) -> str:
    return signal.Signals(number).name if number in signal.valid_signals() else str(number)


def record_ending(
    trace: Path | str,
    time_ns: int,
    ending: ExitStatus,
    warning: str,
    recorded_by: str = "tpumem profile",
) -> None:
    """Appends the ending of a process that died without closing its trace."""
    try:
        append_metadata(trace, time_ns, exit=ending, recorded_by=recorded_by, warnings=[warning])
    except OSError as error:  # the trace stays as the run left it
        if error.errno not in _DISK_FULL:  # (of which the runner has already said)
            print(
                f"tpumem: could not record in {trace} how the run ended: {error.strerror or error}",
                file=sys.stderr,
            )


def write_unopened(
    descriptor: int, metadata: dict[str, Any], ending: ExitStatus, warning: str
) -> None:
    """The header of a trace its process never opened (the empty file open on
    `descriptor`, which this closes), with how the run ended in it."""
    from tpumem.trace.writer import TraceWriter

    try:
        with TraceWriter(
            descriptor,
            {**metadata, "exit": ending, "recorded_by": "tpumem profile", "warnings": [warning]},
            flush_interval_s=0,
        ):
            pass
    except OSError as error:  # (the writer's file owned the descriptor, and closed it)
        if error.errno not in _DISK_FULL:
            print(
                f"tpumem: could not write how the run ended: {error.strerror or error}",
                file=sys.stderr,
            )


def header(trace: Path) -> dict[str, Any] | None:
    """A trace's header (the metadata its writer began with); None where the file
    does not hold a whole one."""
    import pyarrow as pa

    try:
        with pa.memory_map(str(trace)) as source:
            schema = pa.ipc.open_stream(source).schema
    except (OSError, pa.ArrowException, ValueError):
        return None
    raw = (schema.metadata or {}).get(METADATA_KEY)
    with contextlib.suppress(UnicodeDecodeError):
        return parse_object(raw.decode()) if raw is not None else None
    return None


def closed(trace: Path) -> bool:
    """Whether the trace ends with the end-of-stream marker (its writer closed it)."""
    try:
        with open(trace, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < len(END_OF_STREAM):
                return False
            handle.seek(size - len(END_OF_STREAM))
            return handle.read() == END_OF_STREAM
    except OSError:
        return True  # nothing to add to


def end_followed(directory: Path, run: str, reaped: dict[int, int], tree: TreeEnd | None) -> None:
    """`--follow`: the ending of each process of the run `run` that left its trace
    open and whose end this process saw (it was a child of this one, the run's
    subreaper, when it ended); those that `tree` ended (the script had ended) say
    so. An empty trace (its process ended before it wrote its header) recorded
    nothing: it goes. (Traces of an earlier run, kept with --force, are left.)"""
    for trace in sorted(directory.glob("*.tpumem")):
        with contextlib.suppress(OSError):
            if trace.stat().st_size == 0:
                trace.unlink()
                continue
        found = header(trace)
        if found is None or found.get("run") != run:
            continue
        pid = found.get("pid")
        if pid not in reaped or closed(trace):
            continue
        ending, how = exit_status(os.waitstatus_to_exitcode(reaped[pid]))
        if tree is not None and pid in tree.killed:
            warning = (
                f"tpumem profile --follow killed this process (SIGKILL): it was still running "
                f"{tree.waited_s:.0f} s after the script ended, SIGTERM had not ended it"
            )
        elif tree is not None and pid in tree.terminated:
            warning = (
                f"the process {how}: tpumem profile --follow sent it SIGTERM as the script "
                "had ended; the trace holds what was written before"
            )
        else:
            warning = f"the process {how}; the trace holds what was written before"
        start = found.get("start_time_ns") if found is not None else None
        now = time.time_ns() - start if isinstance(start, int) else 0
        record_ending(trace, now, ending, warning, recorded_by="tpumem profile --follow")
