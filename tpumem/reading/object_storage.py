"""Runs kept in object storage (`gs://bucket/run/`, `s3://bucket/run/`), read
where they are (the client: tpumem/storage/client.py).

Only what a command needs travels: the listing, each trace's summary, and in full
only the traces that are analysed (the busiest, and those with no summary that
stands). A summary stands for its trace where the listing's checksum of the trace
is the one its summary was uploaded with (tpumem's uploads record it); else the
trace's last 4 KiB are read, by which a summary knows its trace with its size. The
traces are stand-ins in a scratch directory until read: files of their size, holes
but for their end where it was read (`Fetched.fetch` brings one whole).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from tpumem.errors import TpumemError
from tpumem.outputs import TRACE_SUFFIX, summary_of, summary_url_of
from tpumem.reading.summary_files import END_BYTES, MAX_SUMMARY_BYTES, TAG_KEY, trace_identity
from tpumem.storage.client import StorageError, content_tag, filesystem, said, why


@dataclass
class Fetched:
    """A run's traces in object storage as local stand-ins, each brought whole
    when it is first read in full."""

    traces: list[Path]
    _fs: Any
    # (URL, shortened; why) of each trace there that could not be brought here:
    # left out of the run, which the report says (commands/analysed_runs.py)
    left_out: list[tuple[str, str]] = field(default_factory=list)
    _remote: dict[Path, str] = field(default_factory=dict)  # each stand-in's object
    _brought: set[Path] = field(default_factory=set)  # the stand-ins made whole
    # (size, end digest) of the traces whose summary the listing's checksum vouches
    # for: their ends were not read
    _vouched: dict[Path, tuple[int, str]] = field(default_factory=dict)

    def fetch(self, trace: Path) -> None:
        """The trace at `trace` whole (a no-op for one brought already, or local)."""
        if trace not in self._remote or trace in self._brought:
            return
        remote = self._remote[trace]
        with said(self._fs.unstrip_protocol(remote)):
            self._fs.get_file(remote, str(trace))
        self._brought.add(trace)  # (only once it is whole)
        self._vouched.pop(trace, None)  # (known by its own bytes now)

    def url_of(self, trace: Path) -> str | None:
        """Where a stand-in's trace is kept, as a report names it."""
        remote = self._remote.get(trace)
        return None if remote is None else self._fs.unstrip_protocol(remote)

    def identity(self, trace: Path) -> tuple[int, str] | None:
        """The trace's (size, end digest) as storage vouches for it, where its own
        end was not brought; None: read it from the file."""
        return self._vouched.get(trace)


def fetched_run(url: str, scratch: Path) -> Fetched | None:
    """The traces at `url` (a run's directory, or one trace) as stand-ins in
    `scratch`, with their summaries (None: no trace there); one line for what
    cannot be read."""
    fs, root = filesystem(url)
    with said(url):
        fs.invalidate_cache()  # (a client kept in this process may list from memory)
        listed = fs.ls(root, detail=True) if fs.isdir(root) else [fs.info(root)]
    files = {
        entry["name"]: entry
        for entry in listed
        if entry.get("type", "file") == "file"  # (not a "directory" named x.tpumem)
    }
    traces = sorted(name for name in files if name.endswith(TRACE_SUFFIX))
    if not traces:
        return None
    summaries = {name: summary_url_of(name) for name in traces}
    wanted = [summaries[name] for name in traces if summaries[name] in files]
    # Ranges, not `cat`: no name is read as a pattern, and no summary is read past
    # the size one can have (summary_files.py refuses it then).
    whole = [(0, MAX_SUMMARY_BYTES + 1)] * len(wanted)
    kept = dict(zip(wanted, _ranges(fs, url, wanted, whole), strict=True))
    sizes = {name: int(files[name].get("size") or 0) for name in traces}
    vouched = {
        name: found
        for name in traces
        if (found := _vouched_by(kept.get(summaries[name]), sizes[name], files[name]))
    }
    unvouched = [name for name in traces if name not in vouched]
    spans = [(max(0, sizes[name] - END_BYTES), sizes[name]) for name in unvouched]
    ends = dict(zip(unvouched, _ranges(fs, url, unvouched, spans), strict=True))
    fetched = Fetched([], fs)
    with _scratch_written(scratch):
        scratch.mkdir(parents=True, exist_ok=True)
        longest = _longest_name(scratch)
        for name in traces:
            path = scratch / Path(name).name
            needed = summary_of(path).name if summaries[name] in kept else path.name
            if len(os.fsencode(needed)) > longest:
                # (one name a bucket allows, 1,024 bytes, that no file here may have:
                # that process is left out, not the run refused)
                fetched.left_out.append(
                    (
                        _shortened(fs.unstrip_protocol(name)),
                        f"its name is {len(os.fsencode(needed)):,} bytes here, longer than "
                        f"a file's on this machine may be ({longest}), so it was not brought",
                    )
                )
                continue
            _stand_in(path, sizes[name], ends.get(name, b""))
            if summaries[name] in kept:
                summary_of(path).write_bytes(kept[summaries[name]])
            if name in vouched:
                fetched._vouched[path] = vouched[name]
            fetched._remote[path] = name
            fetched.traces.append(path)
    if not fetched.traces:
        shown, why = fetched.left_out[0]
        raise StorageError(f"{shown}: {why}; no other trace there")
    return fetched


NAME_MAX = 255  # bytes of a path's part, where the file system does not say (Linux's)


def _longest_name(directory: Path) -> int:
    """The most bytes a file's name may have in `directory`."""
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return NAME_MAX


def _shortened(url: str, most: int = 120) -> str:
    """A URL cut in its middle to `most` characters, its start and end kept."""
    if len(url) <= most:
        return url
    return f"{url[: most * 2 // 3]}...{url[-(most // 3 - 3) :]}"


def fetched_file(
    url: str, scratch: Path, run: str | None = None, any_file: bool = False
) -> tuple[Path, str]:
    """A profile in object storage, brought to `scratch`: the object at `url` whole
    (an .xplane.pb; any file with `any_file`, as `import` takes a snapshot), or of
    a logdir or profile directory there the profile run chosen (`run`, else the
    newest), its files at their places below; with what they are called (the URL
    of the directory or object)."""
    from tpumem.xplane import XPLANE_SUFFIX
    from tpumem.xplane.logdir import LAYOUT_DEPTH, chosen_run, in_layout

    fs, root = filesystem(url)
    nothing = f"{url}: no traces (.tpumem files) or XSpace profiles there"
    with said(url):
        if fs.isfile(root):
            name = PurePosixPath(root).name
            if not (any_file or root.endswith(XPLANE_SUFFIX)) or name in ("", ".", ".."):
                raise TpumemError(nothing)
            return _brought(fs, root, scratch / name), url
        # (the layouts are at most six deep: a bucket's other objects below are not walked)
        below = fs.find(root, maxdepth=LAYOUT_DEPTH)
    found = [name[len(root) :].lstrip("/") for name in below if name.startswith(root)]
    profiles = [name for name in found if in_layout(name)]
    if not profiles:
        raise TpumemError(nothing)
    runs: dict[str, list[str]] = {}
    for name in profiles:
        runs.setdefault(name.rpartition("/")[0], []).append(name)
    by_name: dict[str, str] = {}
    for directory in sorted(runs):  # (of two runs of a name, the first, as import_.py's)
        by_name.setdefault(directory.rpartition("/")[2] or PurePosixPath(root).name, directory)
    directory = by_name[chosen_run(list(by_name), run, url)]
    # (below a directory of the name given, as it is here: a profile run's files
    # given alone are named after their directory, which is the run's name)
    here = scratch / (PurePosixPath(root).name or "logdir")
    for name in runs[directory]:
        _brought(fs, f"{root.rstrip('/')}/{name}", here / name)
    return here, url


def _brought(fs: Any, name: str, target: Path) -> Path:
    with _scratch_written(target.parent):
        target.parent.mkdir(parents=True, exist_ok=True)
    with said(fs.unstrip_protocol(name)):
        fs.get_file(name, str(target))
    return target


def _ranges(fs: Any, url: str, names: list[str], spans: list[tuple[int, int]]) -> list[bytes]:
    """The byte ranges of the objects, requested together; one line for any refused."""
    if not names:
        return []
    with said(url):
        got: list[bytes] = fs.cat_ranges(names, [s for s, _ in spans], [e for _, e in spans])
    for name, one in zip(names, got, strict=True):
        if isinstance(one, BaseException):
            raise StorageError(f"{fs.unstrip_protocol(name)}: {why(one)}")
    return got


def _vouched_by(summary: bytes | None, size: int, entry: dict[str, Any]) -> tuple[int, str] | None:
    """The trace's identity as its summary has it, where the listing's checksum of
    the trace and its size are the ones the summary was uploaded with."""
    tag = content_tag(entry)
    if summary is None or tag is None:
        return None
    try:
        kept = json.loads(summary)
    except (ValueError, RecursionError, UnicodeDecodeError):
        return None  # (read_summary says why, from the file)
    if not isinstance(kept, dict) or kept.get(TAG_KEY) != tag:
        return None
    return trace_identity(kept, size)


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
