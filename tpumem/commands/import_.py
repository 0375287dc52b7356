"""`tpumem import`: XSpace profiles into traces, one per host."""

from __future__ import annotations

from pathlib import Path

from tpumem.commands.requests import ImportRequest
from tpumem.errors import TpumemError
from tpumem.importer import find_profiles, import_profile
from tpumem.outputs import check_target, create_trace, default_trace
from tpumem.progress import progress


def default_output(source: Path, run: str, host: str, hosts: int) -> Path:
    """The run's name for a logdir, the file's for a file; the host's when several."""
    stem = run if source.is_dir() else host
    return Path(f"{stem}.{host}.tpumem" if hosts > 1 else f"{stem}.tpumem")


def run_import(request: ImportRequest) -> None:
    path, output, force = request.path, request.output, request.force
    run_name, hosts = find_profiles(path, request.run)
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
        if check_target(target, inputs) and not force:  # before any work is done
            raise TpumemError(f"{target}: exists; use --force to replace it, or -o another name")
        targets.append(target)
    for host, planned in zip(hosts, targets, strict=True):
        default = default_output(path, run_name, host.host, len(hosts))

        def create(target: Path | None = planned, default: Path = default) -> tuple[Path, int]:
            if target is None:
                return default_trace(default, inputs)
            return target, create_trace(target, inputs, force)

        with progress(f"importing {host.path}"):
            written, count, programs = import_profile(host, run_name, create)
        held = f", {programs:,} compiled programs" if programs else ""
        print(f"{written}: {count:,} memory events{held} from {host.path}")
