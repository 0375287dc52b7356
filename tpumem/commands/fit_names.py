"""How `tpumem fit` names what it writes and says, for one compile and for a
sweep's many (fit.py, fit_sweep.py): the trace's default name, a slice's label,
and the slices the script did not get through."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tpumem.commands.requests import FitRequest


def default_name(request: FitRequest, suffix: str = "") -> Path:
    stem = request.target.rsplit(".", 1)[-1] if request.module else Path(request.target).stem
    # A value becomes part of a file name: what a name may not hold is left out.
    kept = "".join(c if c.isalnum() or c in "._-" else "_" for c in suffix)
    return Path(f"{stem}.fit{kept}.tpumem")


def label(request: FitRequest, topology: Any) -> str:
    """The slice as the trace and the report name it: `v5e:2x4`, or with
    --slices, `v5e:2x4 x2` (its generation still the name's first part)."""
    return topology.name if request.slices == 1 else f"{topology.name} x{request.slices}"


def say_short(short: set[str]) -> None:
    for topology in sorted(short):
        print(
            f"tpumem: the script did not get through on {topology} (the report says where): "
            "the answer covers only the programs it called before",
            file=sys.stderr,
        )
