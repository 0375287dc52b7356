"""`tpumem import SNAPSHOT.pickle`: a PyTorch memory snapshot into a trace file."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tpumem.errors import TpumemError
from tpumem.snapshots.convert import Converted, write_snapshot
from tpumem.trace.reader import PICKLE_STARTS
from tpumem.trace.writer import TraceWriter


def is_snapshot(path: Path) -> bool:
    """A pickle by its first bytes, or by its name (then a damaged one is told
    as a snapshot, not as an XSpace)."""
    if path.suffix in (".pickle", ".pkl") and not path.is_dir():
        return True
    try:
        with open(path, "rb") as file:
            return file.read(2) in PICKLE_STARTS  # (no XSpace starts so)
    except OSError:
        return False


def import_snapshot(
    path: Path,
    create: Callable[[], tuple[Path, int]],
    on_progress: Callable[[int], None] | None = None,
) -> tuple[Path, Converted]:
    """Writes the snapshot's trace in the file `create` makes once the snapshot's
    first part was read; a snapshot that turns out unreadable later leaves no
    file behind (half a history would read as a whole one)."""
    made: list[Path] = []
    writers: list[TraceWriter] = []

    def writer_for(metadata: dict[str, Any]) -> TraceWriter:
        for output in made:  # (written again from the start: write_snapshot)
            _remove(output)
        made.clear()
        output, descriptor = create()
        made.append(output)
        writers.append(TraceWriter(descriptor, metadata, flush_interval_s=0))
        return writers[-1]

    try:
        converted = write_snapshot(path, writer_for, on_progress)
        failed = writers[-1].failed if writers else None
        if failed is not None:
            raise TpumemError(
                f"{made[0]}: writing failed ({failed.strerror or failed}); nothing was kept"
            )
    except TpumemError:
        _remove_all(made)
        raise
    except Exception as error:  # (a value no snapshot holds, found late: one line)
        _remove_all(made)
        raise TpumemError(
            f"{path}: not a readable PyTorch memory snapshot: {type(error).__name__}: {error}"
        ) from None
    except BaseException:
        _remove_all(made)
        raise
    return made[0], converted


def _remove_all(paths: list[Path]) -> None:
    for path in paths:
        _remove(path)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
