"""`tpumem export tensorboard`: traces where TensorBoard (XProf) shows them."""

from __future__ import annotations

import sys
from pathlib import Path

from tpumem.errors import TpumemError
from tpumem.progress import progress
from tpumem.reading.paths import traces_of


def run_export(paths: list[Path], logdir: Path, run: str | None, force: bool) -> None:
    """A run's directory exports as one run, named after it (unless --run)."""
    from tpumem.export.tensorboard import export_tensorboard, exported_lines, safe_name

    directories = [p for p in paths if p.is_dir()]
    if directories and len(paths) > 1:
        raise TpumemError("export one run's directory at a time, or give trace files")
    traces, _, _ = traces_of(paths)
    if directories and run is None:
        run = safe_name(directories[0].resolve().name)
    with progress(f"exporting to {logdir}"):
        exported = export_tensorboard(traces, logdir, run, force)
    print(exported_lines(exported), file=sys.stderr)
