"""`tpumem import`: XSpace profiles into traces, one per host."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tpumem.commands.requests import ImportRequest
from tpumem.commands.uploading import upload_traces, written_here
from tpumem.errors import TpumemError
from tpumem.importer import find_profiles, import_profile, refuse_what_is_no_file
from tpumem.outputs import check_target, create_trace, default_trace, remote_url
from tpumem.progress import progress
from tpumem.snapshots.importing import import_snapshot, is_snapshot
from tpumem.units import counted, format_bytes


def default_output(source: Path, run: str, host: str, hosts: int) -> Path:
    """The run's name for a logdir, the file's for a file; the host's when several."""
    stem = run if source.is_dir() else host
    return Path(f"{stem}.{host}.tpumem" if hosts > 1 else f"{stem}.tpumem")


def run_import(request: ImportRequest) -> None:
    written: list[Path] = []
    try:
        with _brought(request) as (path, called):
            refuse_what_is_no_file(path, called)  # (before any open: a FIFO's waits)
            if is_snapshot(path):
                written.append(_import_snapshot(request, path, called))
            else:
                _import_profiles(request, path, called, written)
    except TpumemError:
        # (bound for object storage: what was imported is put there, even where a
        # later host's import failed)
        for line in upload_traces(written, request.force):
            print(f"tpumem: error: {line}", file=sys.stderr)
        raise
    failed = upload_traces(written, request.force)
    if failed:
        more = f" (and {counted(len(failed) - 1, 'more trace')} not put)" if len(failed) > 1 else ""
        raise TpumemError(failed[0] + more)


@contextmanager
def _brought(request: ImportRequest) -> Iterator[tuple[Path, str]]:
    """What to import, here: the path given, or what it names in object storage
    brought to a scratch directory for as long as the import lasts; with what to
    call it."""
    url = remote_url(request.path)
    if url is None:
        yield request.path, str(request.path)
        return
    from tpumem.reading.object_storage import fetched_file

    with tempfile.TemporaryDirectory(prefix="tpumem-") as scratch:
        with progress(f"reading {url}"):
            brought = fetched_file(url, Path(scratch), request.run, any_file=True)
        yield brought


def _import_profiles(request: ImportRequest, path: Path, called: str, written: list[Path]) -> None:
    output, force = request.output, request.force
    run_name, hosts = find_profiles(path, request.run, None if called == str(path) else called)
    inputs = [host.path for host in hosts]
    targets: list[Path | None] = []
    for host in hosts:
        if output is None:
            targets.append(None)
            continue
        target = (
            output.with_name(f"{output.stem}.{host.host}{output.suffix or '.tpumem'}")
            if len(hosts) > 1
            else output
        )
        here = written_here(target, force, fills=False)  # (object storage: its copy here)
        assert here is not None
        if check_target(here, inputs) and not force:  # before any work is done
            raise TpumemError(f"{here}: exists; use --force to replace it, or -o another name")
        targets.append(here)
    for host, planned in zip(hosts, targets, strict=True):
        default = default_output(path, run_name, host.host, len(hosts))

        def create(target: Path | None = planned, default: Path = default) -> tuple[Path, int]:
            if target is None:
                return default_trace(default, inputs)
            target.parent.mkdir(parents=True, exist_ok=True)
            return target, create_trace(target, inputs, force)

        shown = host.name
        with progress(f"importing {shown}"):
            trace, count, programs = import_profile(host, run_name, create)
        held = f", {programs:,} compiled programs" if programs else ""
        print(f"{trace}: {count:,} memory events{held} from {shown}")
        _summarise(trace)
        written.append(trace)


def _import_snapshot(request: ImportRequest, path: Path, called: str) -> Path:
    """A PyTorch memory snapshot: one trace, its devices in it."""
    output = written_here(request.output, request.force, fills=False)
    if request.run is not None:
        raise TpumemError("--run picks a run of a TensorBoard logdir; a snapshot has one")
    if output is not None and check_target(output, [path]) and not request.force:
        raise TpumemError(f"{output}: exists; use --force to replace it, or -o another name")
    if not path.exists():
        raise TpumemError(f"{path}: no such file or directory")
    if path.is_dir():
        raise TpumemError(f"{path}: a directory, not a snapshot file")
    size = path.stat().st_size

    def create() -> tuple[Path, int]:
        if output is None:
            return default_trace(Path(f"{path.stem}.tpumem"), [path])
        output.parent.mkdir(parents=True, exist_ok=True)
        return output, create_trace(output, [path], request.force)

    with progress(f"importing {called}") as say:
        written, converted = import_snapshot(
            path, create, lambda read: say(f"{read / max(size, 1):.0%} of {format_bytes(size)}")
        )
    said = f"{written}: {converted.entries:,} trace entries ({converted.allocations:,} allocations)"
    if converted.before:
        said += (
            f", {converted.before:,} allocations ({format_bytes(converted.before_bytes)}) "
            "live before the first"
        )
    if converted.ooms:
        said += f", {converted.ooms} out of memory"
    print(f"{said} from {called}")
    _summarise(written)
    return written


def _summarise(trace: Path) -> None:
    """The imported trace's summary beside it, as a recording's (a host's profile,
    imported where it was written, is then read by the run from its summary)."""
    import sys

    from tpumem.reading.summary_files import summarise_beside

    with progress(f"summarising {trace}"):
        unwritten = summarise_beside(trace)
    if unwritten is not None:
        print(f"tpumem: {unwritten}", file=sys.stderr)
