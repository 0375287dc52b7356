"""`tpumem export tensorboard`: traces where TensorBoard (XProf) shows them."""

from __future__ import annotations

import sys

from tpumem.commands.requests import ExportRequest
from tpumem.errors import TpumemError
from tpumem.outputs import refuse_remote
from tpumem.progress import progress
from tpumem.reading.paths import opened_run


def run_export(request: ExportRequest) -> None:
    """A run's directory exports as one run, named after it (unless --run)."""
    from tpumem.export.tensorboard import export_tensorboard, exported_lines, safe_name

    paths = list(request.paths)
    for given_path in paths:
        refuse_remote(given_path, "what export reads")
    refuse_remote(request.logdir, "the logdir export writes")
    directories = [p for p in paths if p.is_dir()]
    if directories and len(paths) > 1:
        raise TpumemError("export one run's directory at a time, or give trace files")
    run = request.run
    if directories and run is None:
        run = safe_name(directories[0].resolve().name)
    with opened_run(paths) as given, progress(f"exporting to {request.logdir}"):
        exported = export_tensorboard(given.traces, request.logdir, run, request.force)
    print(exported_lines(exported, request.logdir), file=sys.stderr)
