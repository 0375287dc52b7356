"""`tpumem import`: XSpace profiles (one `.xplane.pb` per host) into trace files."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError

from tpumem.errors import TpumemError
from tpumem.outputs import create_trace
from tpumem.progress import progress
from tpumem.regular_files import NotRegular, read_regular
from tpumem.trace.hlo_rows import MAX_PROTO_BYTES, hlo_row_text
from tpumem.trace.metadata import IMPORTED
from tpumem.trace.reader import is_trace
from tpumem.trace.schema import ALLOCATOR, HLO
from tpumem.trace.writer import TraceWriter
from tpumem.xplane import XPLANE_SUFFIX
from tpumem.xplane.hlo_protos import read_hlo_protos
from tpumem.xplane.logdir import chosen_run, profile_files
from tpumem.xplane.memory_events import MemoryEvents, parse_space, read_memory_events
from tpumem.xplane.trace_columns import (
    allocator_codes,
    mark_columns,
    pair_buffers,
    trace_columns,
)
from tpumem.xplane.wire import WireError

HLO_PROTO_SUFFIX = ".hlo_proto.pb"
_PROGRAM_FILE = re.compile(r".*\((\d+)\)" + re.escape(HLO_PROTO_SUFFIX))
NO_EVENTS_HELP = (
    "TensorFlow records them on CPU only when TF_CPU_ALLOCATOR_USE_BFC=true is set "
    "before it starts (on GPU and TPU always); JAX and PyTorch/XLA record none on CPU"
)


@dataclass(frozen=True, slots=True)
class HostProfile:
    host: str
    path: Path
    # What the user calls it where its path would mislead: its URL, for a profile
    # brought from object storage to a scratch directory.
    called: str | None = None

    @property
    def name(self) -> str:
        return self.called or str(self.path)


def refuse_what_is_no_file(path: Path, shown: str) -> None:
    """One line for what `import` can take nothing from: nothing there, or what is
    neither a regular file nor a directory (a device, a FIFO, whose open would
    wait for a writer for ever; a link to one alike)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise TpumemError(f"{shown}: no such file or directory") from None
    except OSError as error:
        raise TpumemError(f"{shown}: cannot read: {error.strerror or error}") from None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise TpumemError(f"{shown}: not a regular file or a directory, so no profile")


def find_profiles(
    path: Path, run: str | None = None, called: str | None = None
) -> tuple[str, list[HostProfile]]:
    """The run name and its per-host xplane files. A directory may be a logdir
    (plugins/profile/<run>/<host>.xplane.pb), a profile directory, or a run.
    `called`: what the user calls `path` (a URL it was brought from), which its
    files are named below."""
    shown = called or str(path)
    refuse_what_is_no_file(path, shown)
    if is_trace(path):
        raise TpumemError(
            f"{shown}: a tpumem trace already, not a profile to import: tpumem report "
            f"{shown} reads it"
        )
    if path.is_file():
        host = path.name.removesuffix(XPLANE_SUFFIX).removesuffix(".pb")
        return host, [HostProfile(host, path, called)]
    files = profile_files(path)
    if not files:
        raise TpumemError(
            f"{path}: no *{XPLANE_SUFFIX} profiles in it "
            "(a logdir holds plugins/profile/<run>/<host>.xplane.pb)"
        )
    runs: dict[Path, list[Path]] = {}
    for file in files:
        runs.setdefault(file.parent, []).append(file)
    name = chosen_run([d.name for d in runs], run, path)
    directory = next(d for d in runs if d.name == name)
    hosts = [
        HostProfile(f.name.removesuffix(XPLANE_SUFFIX), f, _below(called, path, f))
        for f in runs[directory]
    ]
    return directory.name, hosts


def _below(called: str | None, given: Path, file: Path) -> str | None:
    """A file under the directory `given` as the user knows it: below what they
    call that directory (its URL), where that is not its path."""
    if called is None:
        return None
    return f"{called.rstrip('/')}/{file.relative_to(given).as_posix()}"


def guess_framework(events: MemoryEvents) -> str:
    names = " ".join(sorted(events.event_names))
    # Names only one framework's runtime emits; XLA's own names are shared by all.
    if "TFE_" in names or "EagerExecute" in names or "KernelAndDeviceFunc" in names:
        return "tensorflow"
    if "PjitFunction" in names or "jax" in names.lower():
        return "jax"
    if "torch_xla" in names or "XLATensor" in names:
        return "torch_xla"
    return "unknown"


# Threads that decode a profile's events side by side: past a few, they wait on
# the GIL (what numpy does between its loops) more than they gain.
DECODE_THREADS = min(4, os.cpu_count() or 1)


def read_profile(profile: HostProfile) -> tuple[MemoryEvents, list[tuple[int, bytes]]]:
    """The profile's memory events, and the compiled programs it carries
    (program id, HloProto bytes): in the XSpace, else beside it as XProf keeps them."""
    try:
        data = profile.path.read_bytes()
    except OSError as error:
        raise TpumemError(f"{profile.name}: cannot read: {error.strerror}") from None
    if not data:
        raise TpumemError(f"{profile.name}: empty file, not an XSpace profile")
    try:
        space = parse_space(data)
        events = read_memory_events(space, data, workers=DECODE_THREADS)
        return events, read_hlo_protos(space) or _beside(profile.path)
    except (DecodeError, WireError) as error:
        raise TpumemError(
            f"{profile.name}: not a readable XSpace profile (corrupt or truncated: {error})"
        ) from None


def _beside(path: Path) -> list[tuple[int, bytes]]:
    """Programs XProf extracted from a profile into files beside it
    (`module(program id).hlo_proto.pb`). Only what XProf writes there is read:
    regular files (not a link, which may point anywhere, nor a FIFO, which would
    hang the read) of at most MAX_PROTO_BYTES; others are skipped."""
    found: list[tuple[int, bytes]] = []
    for file in sorted(path.parent.glob(f"*{HLO_PROTO_SUFFIX}")):
        match = _PROGRAM_FILE.fullmatch(file.name)
        data = _read_regular(file, MAX_PROTO_BYTES)
        if data:  # (XProf writes an empty NO_MODULE file for a profile without any)
            # A file not named `module(id)` gets an id of its own, below any real one.
            found.append((int(match.group(1)) if match else -1 - len(found), data))
    return found


def _read_regular(file: Path, most: int) -> bytes | None:
    """The bytes of a regular file of at most `most` bytes (regular_files.py's
    rule); None for anything else."""
    try:
        return read_regular(file, most)
    except (NotRegular, OSError):
        return None


def import_profile(
    profile: HostProfile, run: str, create: Callable[[], tuple[Path, int]]
) -> tuple[Path, int, int]:
    """Writes one host's memory events and compiled programs as a trace, in the
    file `create` makes once the profile was read (a profile with nothing to
    import leaves no file behind); (the trace's path, the event count, the
    program count)."""
    events, programs = read_profile(profile)
    if len(events) == 0 and not programs:
        raise TpumemError(
            f"{profile.name}: no MemoryAllocation/MemoryDeallocation events: {NO_EVENTS_HELP}"
        )
    columns, devices, origin_ps = None, [], int(events.step_time_ps.min(initial=0))
    if len(events):  # (a profile may carry compiled programs only)
        origin_ps = int(min(events.time_ps[0], events.step_time_ps.min(initial=events.time_ps[0])))
        address = events.numeric["addr"].values
        buffer_id = pair_buffers(allocator_codes(events), address, events.is_alloc)
        columns = trace_columns(events, origin_ps, buffer_id)
        devices = sorted(set(columns["device"].dictionary.to_pylist()))  # type: ignore[attr-defined]
    metadata = {
        "framework": guess_framework(events),
        "backend": "gpu"
        if any(d.startswith("GPU") for d in devices)
        else ("tpu" if any(d.startswith("TPU") for d in devices) else "cpu"),
        "source": IMPORTED,
        "imported_from": profile.name,
        "run": run,
        "host": events.hostnames[0] if events.hostnames else profile.host,
        "xspace_planes": tuple(events.plane_names),
        "fidelity": {device: ALLOCATOR for device in devices},
        "start_time_ns": 0,
        "warnings": () if len(events) else (f"no memory events: {NO_EVENTS_HELP}",),
    }
    output, descriptor = create()
    with TraceWriter(descriptor, metadata, flush_interval_s=0) as writer:
        if columns is not None:
            writer.write_columns(columns, len(events))
        marks, count = mark_columns(events, origin_ps)
        if count:
            writer.write_columns(marks, count)
        for program_id, data in programs:
            writer.record(HLO, time_ns=0, text=hlo_row_text(profile.name, data, program_id))
    if writer.failed is not None:
        raise TpumemError(
            f"{output}: writing failed ({writer.failed.strerror or writer.failed}); "
            "the file holds the events written before"
        )
    return output, len(events), len(programs)


def import_into(path: Path, directory: Path, called: str | None = None) -> list[Path]:
    """Every host's trace of the profile at `path`, written in `directory`;
    `called`: what the user calls `path`, where not its path (find_profiles)."""
    run_name, hosts = find_profiles(path, called=called)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for host in hosts:
        target = directory / f"{host.host}.tpumem"

        def create(target: Path = target) -> tuple[Path, int]:
            return target, create_trace(target, (), force=True)

        with progress(f"reading {host.name}"):
            written.append(import_profile(host, run_name, create)[0])
    return written
