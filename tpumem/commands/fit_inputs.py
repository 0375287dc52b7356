"""What `tpumem fit` refuses in one line before anything runs, for a TPU slice
and for a GPU alike (fit.py, fit_gpu.py): the script, the sweeps and -o."""

from __future__ import annotations

from pathlib import Path

from tpumem.commands.requests import FitRequest
from tpumem.errors import TpumemError


def check_inputs(request: FitRequest) -> None:
    """The script, the sweeps and -o, each refused in one line before anything runs."""
    if request.sweeps:
        from tpumem.commands.fit_sweep import check_sweeps

        check_sweeps(request)
    if not request.module:
        _check_script(Path(request.target))
    else:
        _check_module(request.target)
    _check_output(request)


def _check_output(request: FitRequest) -> None:
    """-o refused before anything is compiled or run: the script itself (as
    profile refuses it, --force or not), or a file there without --force."""
    from tpumem.outputs import check_target

    output = request.output
    if output is not None and check_target(output, inputs(request)) and not request.force:
        raise TpumemError(f"{output}: exists; use --force to replace it, or -o another name")


def _check_module(name: str) -> None:
    """`fit -m NAME`: a module Python would not find is one line, before anything
    starts (as profile says it), not runpy's traceback from the compiling process."""
    from tpumem.launch.module_path import module_file

    if module_file(name) is None:
        raise TpumemError(f"no module named {name!r}")


def _check_script(path: Path) -> None:
    if not path.exists():
        raise TpumemError(f"{path}: no such file")
    if not path.is_file():
        raise TpumemError(f"{path}: not a regular file, so not a Python script")


def inputs(request: FitRequest) -> list[Path]:
    """What fit reads, which its trace may not be written over: the script."""
    return [] if request.module else [Path(request.target)]
