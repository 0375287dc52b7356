"""Where tpumem writes, and the rules that keep it from destroying what a user made.

- Nothing is written over an input of the same command: the script being profiled,
  the trace being reported, the profile being imported.
- A trace is written only to a regular file: a directory, a device (/dev/full) or a
  pipe as its output is refused before anything runs. A report may go to a terminal
  or a pipe (`-o /dev/stdout`, a FIFO): it is written to it as it is, never replaced;
  `-o -` is standard output.
- A link given as an output is written through, to the file it names (renamed onto
  there, in that file's directory): the link stays a link.
- A trace is never replaced silently. `profile -o` and `import -o` refuse a file that
  exists unless --force is given (as Nsight Systems' --force-overwrite); without -o,
  the default name takes the first free number (train.tpumem, train-2.tpumem, ...).
  The trace is created exclusively, so two runs never write into one file.
- Reports and pages (`report -o`, `compare --html`) replace an earlier report or
  page of tpumem's of the same name (known by its first bytes: a tpumem title, a
  tpumem JSON schema) or an empty file; anything else (a script, a profile, a
  trace, the user's notes) only with --force. Exported profiles (`export
  tensorboard`) replace nothing without --force. Both are written beside the
  target and renamed onto it, so a full disk leaves the earlier file whole.
- A trace name may hold placeholders (`-o 'run/{host}-{rank}.tpumem'`), filled in
  by the profiled process itself: each process of a distributed run names its own
  trace, and makes the directories the name needs. A rank not known yet is
  written `pid<PID>` until the framework says it; the trace is then renamed.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import string
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from tpumem.errors import TpumemError
from tpumem.trace.schema import FORMAT_NAME

_TRACE_MAGIC = b"\xff\xff\xff\xff"
PLACEHOLDERS = ("host", "rank", "pid")
_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def _why(error: OSError) -> str:
    return error.strerror or str(error)


def _same(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        pass
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):  # a loop of links (RuntimeError before Python 3.13)
        return os.path.abspath(a) == os.path.abspath(b)


def _head(path: Path) -> bytes | None:
    """A file's first bytes, by which tpumem knows what it wrote; None where unreadable."""
    try:
        with open(path, "rb") as handle:
            return handle.read(4096)
    except OSError:
        return None


def is_trace(path: Path) -> bool:
    """Whether a file holds a tpumem trace (by its first bytes)."""
    head = _head(path)
    return head is not None and head.startswith(_TRACE_MAGIC) and FORMAT_NAME.encode() in head


# The first bytes of every report and page tpumem writes (tests/cli/test_outputs.py
# holds each format and command to this).
_REPORT_HEADS = (
    re.compile(rb"(# )?tpumem [a-z]"),  # text and Markdown: the title line
    re.compile(rb'\{\s*"schema":\s*"tpumem-'),  # JSON
    re.compile(rb"<!DOCTYPE html>.*?<title>tpumem ", re.DOTALL),  # a page
)


# A summary's first bytes (reading/summary_files.py writes its format first).
_SUMMARY_HEAD = re.compile(rb'\{\s*"format":\s*"tpumem-summary"')


def is_summary(path: Path) -> bool:
    """Whether a file is a summary tpumem wrote beside a trace (a regular file, not
    a link, known by its first bytes): what a new summary may replace."""
    try:
        if not stat.S_ISREG(path.lstat().st_mode):
            return False
    except OSError:
        return False
    head = _head(path)
    return head is not None and _SUMMARY_HEAD.match(head) is not None


def is_report(path: Path) -> bool:
    """Whether a file is empty or holds a report or page tpumem wrote."""
    head = _head(path)
    return head is not None and (not head or any(p.match(head) for p in _REPORT_HEADS))


STDOUT = Path("-")  # `-o -`: a report on standard output, as the convention is
# Object storage named without a bucket (`-o s3://`, which a Path keeps as `s3:`).
_NO_BUCKET = re.compile(r"^(gs|gcs|s3):/*$")


def no_bucket(path: Path | str) -> str | None:
    """Why `path` names no place to write (`s3://` without its bucket, which a Path
    keeps as a local name, `s3:`), or None."""
    bare = _NO_BUCKET.match(str(path))
    if bare is None:
        return None
    return f"{bare.group(1)}://: no bucket named; give {bare.group(1)}://BUCKET/NAME"


def landing(path: Path) -> Path:
    """Where a write to `path` lands: the file a link names, followed to the end,
    so that a link given as an output is written through, never replaced."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def is_stream(path: Path) -> bool:
    """Whether `path` is a terminal, a device or a pipe (/dev/stdout, a FIFO), or a
    file a process holds open (/dev/stdout of `>> log`): what a report is written
    to as it is, never replaced."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode) or open_descriptor(path) is not None


_LINK_HOPS = 40  # as the kernel's own limit on a path's links


def open_descriptor(path: Path) -> tuple[str, int] | None:
    """(process, descriptor) where `path`'s links pass through /proc/PID/fd/N
    (/dev/stdout, /dev/fd/1, /proc/self/fd/1): a file some process holds open,
    written through that descriptor, never truncated or renamed onto (a shell's
    `>> log` would lose what the log held)."""
    current = Path(os.path.abspath(path))
    for _ in range(_LINK_HOPS):
        parent = Path(os.path.realpath(current.parent))
        in_proc_fd = parent.name == "fd" and parent.parent.parent == Path("/proc")
        if in_proc_fd and current.name.isdigit():
            return parent.parent.name, int(current.name)
        try:
            target = os.readlink(current)
        except OSError:
            return None
        current = Path(os.path.normpath(parent / target))
    return None


def check_target(path: Path, inputs: Iterable[Path | str] = (), streams: bool = False) -> bool:
    """Refuses a target that is an input, or that is not (or cannot become) a
    regular file (`streams`: or a terminal, a device or a pipe, which a report is
    written to as it is); True when it exists."""
    unnamed = no_bucket(path)
    if unnamed is not None:
        raise TpumemError(unnamed)
    if path == STDOUT:
        raise TpumemError("-o -: standard output takes a report, not this; give a file name")
    for source in inputs:
        if _same(path, Path(source)):
            raise TpumemError(f"{path}: is an input of this command; choose another output")
    try:
        info = path.stat()
    except FileNotFoundError:
        parent = landing(path).parent  # (a link to a file not made yet: the link's target)
        if not parent.is_dir():
            raise TpumemError(f"{path}: no such directory: {parent}") from None
        return False
    except OSError as error:
        raise TpumemError(f"{path}: cannot write: {_why(error)}") from None
    if stat.S_ISDIR(info.st_mode):
        raise TpumemError(f"{path}: is a directory; give a file name")
    if streams and (stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode)):
        return True
    if not stat.S_ISREG(info.st_mode):
        raise TpumemError(f"{path}: not a regular file; tpumem writes only to files")
    if not _named(path):
        raise TpumemError(f"{path}: a link to a file that has no name to write it by")
    return True


def _named(path: Path) -> bool:
    """Whether the file at `path` is the one its name, links followed, names: not
    so through /proc where the file was deleted (/dev/stdout onto one), which has
    no name to write beside and rename onto."""
    try:
        return os.path.samefile(landing(path), path)
    except OSError:
        return False


def free_name(path: Path, taken: set[Path] | None = None) -> Path:
    """`path`, or the first of path-2, path-3, ... that is neither on disk nor taken."""
    candidate, number = path, 2
    while candidate.exists() or (taken is not None and candidate in taken):
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
        number += 1
    if taken is not None:
        taken.add(candidate)
    return candidate


def placeholders(pattern: str) -> set[str]:
    """The placeholders a trace name holds; one clear line for anything else in braces."""
    try:
        fields = list(string.Formatter().parse(pattern))
    except ValueError as error:
        raise TpumemError(f"{pattern}: {error} (a literal brace is written twice)") from None
    found = set()
    for _, name, spec, conversion in fields:
        if name is None:
            continue
        if name not in PLACEHOLDERS or spec or conversion:
            known = ", ".join("{" + p + "}" for p in PLACEHOLDERS)
            raise TpumemError(f"{pattern}: unknown placeholder {{{name}}} (known: {known})")
        found.add(name)
    return found


def literal_name(pattern: Path) -> Path:
    """A trace name without placeholders, as written: a brace doubled to be
    literal (`{{rank}}`) is one brace in the name, as the error for a lone one says."""
    return Path(literal_text(str(pattern)))


def literal_text(pattern: str) -> str:
    """`literal_name` for a name that is not a path here (a URL)."""
    return pattern.format() if "{" in pattern or "}" in pattern else pattern


def fill_placeholders(pattern: str, host: str, rank: int | None, pid: int) -> Path:
    """A trace name with its placeholders filled; a rank not known yet is `pid<PID>`."""
    return Path(
        pattern.format(
            host=_UNSAFE_IN_NAME.sub("_", host).strip("._") or "host",
            rank=f"pid{pid}" if rank is None else str(rank),
            pid=str(pid),
        )
    )


# A URL as a command's argument gives it; a Path keeps one slash of the two.
_URL = re.compile(r"^(gs|gcs|s3):/+(.+)$")


def refuse_remote(path: Path | str | None, what: str) -> None:
    """One line where object storage is given for what is read or written only on
    this machine (a trace being written, an output): not a file there named gs:."""
    if path is not None and remote_url(path) is not None:
        raise TpumemError(
            f"{remote_url(path)}: {what} is on this machine's disk only, not in object storage"
        )


def remote_url(path: Path | str) -> str | None:
    """The object storage URL `path` stands for, or None for a local path."""
    found = _URL.match(str(path))
    return f"{found.group(1)}://{found.group(2)}" if found else None


TRACE_SUFFIX = ".tpumem"  # (a run's traces are the files of its directory so named)
_SUMMARY = ".summary.json"


def summary_of(trace: Path) -> Path:
    """Where a trace's summary is kept: beside it, `rank0.tpumem.summary.json`
    (reading/summary_files.py)."""
    return trace.with_name(trace.name + _SUMMARY)


def summary_url_of(url: str) -> str:
    """`summary_of` for a trace kept in object storage, by its URL."""
    return url + _SUMMARY


def trace_of_summary(path: Path) -> Path | None:
    """The trace a summary file stands for (None: not a summary's name)."""
    if not path.name.endswith(TRACE_SUFFIX + _SUMMARY):
        return None
    return path.with_name(path.name[: -len(_SUMMARY)])


def _drop_summary(trace: Path) -> None:
    """A new trace under a name takes its summary with it: an older trace's summary
    there would stand for one that is gone. A file of that name that is not one of
    tpumem's summaries is the user's, and stays."""
    if is_summary(summary_of(trace)):
        with contextlib.suppress(OSError):
            summary_of(trace).unlink(missing_ok=True)


def create_trace_at(path: Path, force: bool) -> int:
    """A profiled process's own trace (a name with placeholders, filled in): the
    directories it needs are made first."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise TpumemError(f"{path.parent}: cannot make the directory: {_why(error)}") from None
    return create_trace(path, (), force)


def rename_trace(old: Path, new: Path, force: bool) -> None:
    """Gives a trace being written its final name. An existing file is replaced
    only with `force`; the trace then keeps its name, and this says why."""
    if force:
        try:
            os.replace(old, landing(new))
        except OSError as error:
            raise TpumemError(f"{new}: cannot rename {old} to it: {_why(error)}") from None
        _drop_summary(new)
        return
    try:
        os.link(old, new)  # fails where `new` exists: nothing is replaced silently
    except FileExistsError:
        raise TpumemError(f"{new}: exists; the trace stays {old} (--force replaces)") from None
    except OSError as error:
        raise TpumemError(f"{new}: cannot rename {old} to it: {_why(error)}") from None
    old.unlink(missing_ok=True)


def create_trace(path: Path, inputs: Iterable[Path | str], force: bool) -> int:
    """Creates the trace file, exclusively; its open descriptor. An existing file is
    replaced only with `force`."""
    refuse_remote(path, "a trace being written")
    exists = check_target(path, inputs)
    target = landing(path)  # (a link: the file it names is the trace, the link stays)
    if exists:
        if not force:
            raise TpumemError(f"{path}: exists; use --force to replace it, or -o another name")
        try:
            target.unlink()
        except OSError as error:
            raise TpumemError(f"{path}: cannot replace: {_why(error)}") from None
    try:
        descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        raise TpumemError(f"{path}: another process created it just now; not replaced") from None
    except OSError as error:
        raise TpumemError(f"{path}: cannot write: {_why(error)}") from None
    _drop_summary(path)
    return descriptor


def default_trace(path: Path, inputs: Iterable[Path | str]) -> tuple[Path, int]:
    """A trace under the first free numbered name; (path, open descriptor)."""
    inputs = list(inputs)
    while True:
        candidate = free_name(path)
        try:
            return candidate, create_trace(candidate, inputs, force=False)
        except TpumemError:
            if not candidate.exists():
                raise
            # Another run took that name between the look and the creation: the next.


def emit(text: str, output: Path | None, inputs: list[Path], force: bool) -> None:
    """A report to stdout, or to `output` (whole or not at all; tpumem/outputs.py)."""
    if output is None or output == STDOUT:
        sys.stdout.write(text)
        return
    write_report(output, text, inputs, force)
    print(f"tpumem: wrote {output}", file=sys.stderr)


def write_report(path: Path, text: str, inputs: Iterable[Path | str], force: bool) -> None:
    """Writes a report or page in full, then renames it onto `path` (through a
    link); a terminal or a pipe is written to as it is."""
    refuse_remote(path, "a report written")
    exists = check_target(path, inputs, streams=True)
    if exists and is_stream(path):
        _write_stream(path, text.encode())
        return
    if exists and not force and not is_report(path):
        what = "a tpumem trace" if is_trace(path) else "not a report of tpumem's"
        raise TpumemError(f"{path}: exists and is {what}; use --force to replace it, or another -o")
    write_whole(path, text.encode())


def _write_stream(path: Path, data: bytes) -> None:
    """A report written to a terminal, a device or a pipe (/dev/stdout): opened
    as it is, never created, truncated or replaced."""
    held = open_descriptor(path)
    try:
        if held is not None and held[0] in ("self", str(os.getpid())):
            descriptor = os.dup(held[1])  # this process's own: as the shell opened it
        else:  # another's, or a device: appended to, never truncated
            flags = os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC
            descriptor = os.open(path, flags | (os.O_APPEND if held is not None else 0))
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
    except OSError as error:
        raise TpumemError(f"{path}: cannot write: {_why(error)}") from None


def write_new(path: Path, data: bytes, force: bool) -> None:
    """Writes a file that must not exist yet (an exported profile), unless `force`."""
    if check_target(path) and not force:
        raise TpumemError(f"{path}: exists; use --force to replace it, or another --run")
    write_whole(path, data)


def write_whole(path: Path, data: bytes) -> None:
    """Writes beside `path` and renames onto it: whole or not at all. A link is
    written through: the file it names is replaced, in its own directory."""
    path = landing(path)
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as error:
        raise TpumemError(f"{path}: cannot write: {_why(error)}") from None
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(temporary, 0o666 & ~mask)
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise TpumemError(f"{path}: cannot write: {_why(error)}") from None
