"""`tpumem export tensorboard`: runs laid out the way TensorBoard and its profile
plugin (XProf) find them.

    <logdir>/plugins/profile/<run>/<host>.xplane.pb   XProf's memory_profile tool
    <logdir>/plugins/profile/<run>/<module>(<id>).hlo_proto.pb  memory_viewer, per program
    <logdir>/<run>/events.out.tfevents.*               scalars, one run per trace

Traces imported from one multi-host profile (same `run` in their metadata,
different hosts) export as one run with a file per host, as XProf expects.
Scalars per device: bytes in use and pool held in MiB, and fragmentation, the maximum of
each training step where the trace has step marks (step = the training step), else
the drawing points of the analysis (step = the point's number).
"""

from __future__ import annotations

import re
import shlex
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tpumem.analysis.device_events import step_marks
from tpumem.analysis.drawing.series import device_series
from tpumem.analysis.per_step import per_step_max
from tpumem.analysis.trace_figures import DeviceEventFigures, device_event_figures
from tpumem.distinct_names import distinct_names, numbered
from tpumem.errors import TpumemError
from tpumem.export.event_file import EventFileWriter
from tpumem.export.xspace import memory_space, trace_programs
from tpumem.outputs import remote_url, write_new
from tpumem.trace.metadata import IMPORTED
from tpumem.trace.model import Trace
from tpumem.trace.reader import load
from tpumem.xplane.hlo_protos import module_file_name

POINTS = 1000  # scalar points per device for traces without step marks
# Sizes as TensorBoard's SCALARS tab shows them: in MiB (its axes would print
# bytes as 5.5e+7), the unit in the tag's name.
MIB = float(1 << 20)
IN_USE, POOL, FRAGMENTATION = "in_use_MiB", "pool_MiB", "fragmentation"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_UNSAFE_FILE = re.compile(r"[^A-Za-z0-9._()-]+")


@dataclass(frozen=True, slots=True)
class ExportedRun:
    run: str
    xplanes: tuple[Path, ...]
    scalars: tuple[Path, ...]
    programs: tuple[str, ...] = ()  # modules XProf's memory_viewer lists


def memory_tool_path(run: str, host: str, tool: str = "memory_profile") -> str:
    """Where in TensorBoard the profile plugin opens on a memory tool for `run`:
    its page with the run, tool and host asked for (XProf reads them there); its
    PROFILE tab opens on the Overview page, which says nothing of memory."""
    query = urllib.parse.urlencode({"run": run, "tag": tool, "host": host})
    return f"/data/plugin/profile/index.html?{query}"


def exported_lines(
    exported: list[ExportedRun], logdir: Path, named: Callable[[Path], str] = str
) -> str:
    """A line per run exported, with its files (each called `named`: where it was
    put); then how to look, and where TensorBoard opens on each run's memory (on
    its default port)."""
    lines = []
    for item in exported:
        files = ", ".join(named(p) for p in (*item.xplanes, *item.scalars))
        lines.append(f"tpumem: run {item.run}: {files}")
    lines.append(
        f"tpumem: to look: tensorboard --logdir {shlex.quote(remote_url(logdir) or str(logdir))}; "
        "its PROFILE tab "
        "opens on XProf's Overview page, these on each run's Memory Profile:"
    )
    for item in exported:
        host = item.xplanes[0].name.removesuffix(".xplane.pb")
        lines.append(f"tpumem:   http://localhost:6006{memory_tool_path(item.run, host)}")
    return "\n".join(lines)


def _file_safe(text: str) -> str:
    """A program's name (`jit_step(6)`, XProf's) as a file name: as it is, less
    what a path cannot hold."""
    return _UNSAFE_FILE.sub("_", text).strip(".") or "module"


def safe_name(text: str) -> str:
    return _UNSAFE.sub("_", text).strip("._") or "run"


def _host(trace: Trace) -> str:
    return safe_name(trace.metadata.host or "localhost")


def _hosts(traces: list[Trace]) -> list[str]:
    """The name XProf shows each trace of a run by: its host; where processes of
    a distributed run share a host, its rank (or pid) too."""
    hosts = [_host(trace) for trace in traces]
    named = []
    for host, trace in zip(hosts, traces, strict=True):
        if hosts.count(host) > 1:
            process, pid = trace.metadata.process, trace.metadata.pid
            if process is not None and process.index is not None:
                host = f"{host}-{process.index}"
            elif pid is not None:
                host = f"{host}-pid{pid}"
        named.append(host)
    return named


def _run_names(loaded: list[Loaded], forced: str | None) -> list[str]:
    """Each trace's run: the one given (--run, a run's directory), else an imported
    profile's own run (its hosts one run, as XProf expects), else what tells its
    path from the others' (v1/train.tpumem and v3/train.tpumem are runs v1_train and
    v3_train, never one run of two hosts: distinct_names.py)."""
    if forced:
        return [safe_name(forced)] * len(loaded)
    imported = [t.metadata.run if t.metadata.source == IMPORTED else None for _, t, _ in loaded]
    by_path = [str(path) for (path, _, _), run in zip(loaded, imported, strict=True) if not run]
    told = iter(numbered([safe_name(name) for name in distinct_names(by_path)]))
    return [safe_name(run) if run else next(told) for run in imported]


def _scalars(
    trace: Trace, figures: list[DeviceEventFigures], directory: Path, host: str, prefix: str
) -> Path:
    start_s = (trace.metadata.start_time_ns or 0) / 1e9
    writer = EventFileWriter(directory, start_s, host)
    step_times, step_numbers = step_marks(trace)
    by_step: dict[int, tuple[float, dict[str, float]]] = {}
    for device in figures:
        events, name = device.events, f"{prefix}{device.events.device}"
        pool = device.pool
        columns = {
            IN_USE: events.in_use.astype(np.float64) / MIB,
            FRAGMENTATION: device.fragmentation,
        }
        if pool is not None and len(pool) == len(events):
            columns[POOL] = pool.astype(np.float64) / MIB
        if len(step_times) >= 2:
            for figure, column in columns.items():
                for step, value in per_step_max(events.time_ns, column, step_times, step_numbers):
                    wall = start_s + float(step_times[np.searchsorted(step_numbers, step)]) / 1e9
                    by_step.setdefault(step, (wall, {}))[1][f"{name}/{figure}"] = value
            continue
        series = device_series(trace, events, device.fragmentation, pool, POINTS)
        for index, time_ns in enumerate(series.time_ns):
            values = {f"{name}/{IN_USE}": series.in_use[index] / MIB}
            fragmentation = series.fragmentation[index]
            if fragmentation is not None:
                values[f"{name}/{FRAGMENTATION}"] = float(fragmentation)
            if series.pool is not None:
                values[f"{name}/{POOL}"] = series.pool[index] / MIB
            writer.add(start_s + time_ns / 1e9, index, values)
    for step in sorted(by_step):
        wall, values = by_step[step]
        writer.add(wall, step, values)
    writer.close()
    return writer.path


# A trace to export: its file, the trace, and its devices' analysis (made once).
Loaded = tuple[Path, Trace, list[DeviceEventFigures]]


def export_tensorboard(
    traces: list[Path], logdir: Path, run: str | None = None, force: bool = False
) -> list[ExportedRun]:
    loaded = []
    for path in traces:
        trace = load(path)
        loaded.append((path, trace, device_event_figures(trace)))
    return export_loaded(loaded, logdir, run, force)


def export_loaded(
    loaded: list[Loaded], logdir: Path, run: str | None = None, force: bool = False
) -> list[ExportedRun]:
    """Traces already loaded and analysed (`profile --tensorboard` has them)."""
    groups: dict[str, list[Loaded]] = {}
    for item, name in zip(loaded, _run_names(loaded, run), strict=True):
        groups.setdefault(name, []).append(item)
    exported = []
    for name, members in groups.items():
        hosts = _hosts([trace for _, trace, _ in members])
        if len(set(hosts)) < len(hosts):
            raise TpumemError(
                f"run {name!r}: {len(hosts)} traces but hosts {sorted(set(hosts))}: traces "
                "of one run must come from different hosts or processes (or give --run "
                "per export)"
            )
        profile_dir = logdir / "plugins" / "profile" / name
        try:
            profile_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise TpumemError(f"{profile_dir}: cannot create: {error.strerror}") from None
        xplanes, scalars = [], []
        files: dict[str, bytes] = {}  # XProf's own cache of each program, by name
        for (_, trace, figures), host in zip(members, hosts, strict=True):
            target = profile_dir / f"{host}.xplane.pb"
            programs = trace_programs(trace)
            write_new(target, memory_space(trace, host, figures, programs), force)
            xplanes.append(target)
            for program_id, module, data in programs:
                files.setdefault(module_file_name(module, program_id), data)
            prefix = f"{host}/" if len(members) > 1 else ""
            scalars.append(_scalars(trace, figures, logdir / name, host, f"tpumem/{prefix}"))
        for module, data in files.items():
            write_new(profile_dir / f"{_file_safe(module)}.hlo_proto.pb", data, force)
        exported.append(ExportedRun(name, tuple(xplanes), tuple(scalars), tuple(files)))
    return exported
