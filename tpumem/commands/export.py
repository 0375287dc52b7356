"""`tpumem export tensorboard`: traces where TensorBoard (XProf) shows them."""

from __future__ import annotations

import sys
from pathlib import Path

from tpumem.commands.common import progress


def run_export(traces: list[Path], logdir: Path, run: str | None, force: bool) -> None:
    from tpumem.export.tensorboard import export_tensorboard

    with progress(f"exporting to {logdir}"):
        said(export_tensorboard(traces, logdir, run, force))


def said(exported: list) -> None:
    """A line per run exported, with its files."""
    for item in exported:
        files = ", ".join(str(p) for p in (*item.xplanes, *item.scalars))
        print(f"tpumem: run {item.run}: {files}", file=sys.stderr)
