"""`tpumem export tensorboard`: traces where TensorBoard (XProf) shows them."""

from __future__ import annotations

import sys
from pathlib import Path

from tpumem.commands.requests import ExportRequest
from tpumem.commands.uploading import logdir_written
from tpumem.errors import TpumemError
from tpumem.outputs import TRACE_SUFFIX, remote_url
from tpumem.progress import progress
from tpumem.reading.paths import opened_run


def run_export(request: ExportRequest) -> None:
    """A run's directory exports as one run, named after it (unless --run)."""
    from tpumem.export.tensorboard import export_tensorboard, exported_lines, safe_name

    paths = list(request.paths)
    directories = [p for p in paths if _run_directory(p)]
    if directories and len(paths) > 1:
        raise TpumemError("export one run's directory at a time, or give trace files")
    run = request.run
    if directories and run is None:
        run = safe_name(_name(directories[0]))
    with (
        opened_run(paths) as given,
        logdir_written(request.logdir, request.force) as (logdir, named),
        progress(f"exporting to {remote_url(request.logdir) or request.logdir}"),
    ):
        if given.stored is not None:  # (exported whole: each trace brought)
            for trace in given.traces:
                given.stored.fetch(trace)
        exported = export_tensorboard(given.traces, logdir, run, request.force)
    print(exported_lines(exported, request.logdir, named), file=sys.stderr)


def _run_directory(path: Path) -> bool:
    """A run's directory: here, or in object storage (a URL not naming one trace)."""
    url = remote_url(path)
    return path.is_dir() if url is None else not url.endswith(TRACE_SUFFIX)


def _name(directory: Path) -> str:
    url = remote_url(directory)
    return directory.resolve().name if url is None else url.rstrip("/").rsplit("/", 1)[-1]
