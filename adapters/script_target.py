"""Running the user's script or module as `python script.py ARGS` (or `python -m
module ARGS`) would: sys.argv, sys.path[0], a fresh `__main__`, the working
directory untouched. Shared by the profiled process (runner.py) and the compiled,
never run one (fit_runner.py)."""

from __future__ import annotations

import os
import runpy
import sys
import types
from collections.abc import Sequence


def run_target(target: str, args: Sequence[str], module: bool) -> None:
    if module:
        sys.argv = [target, *args]  # runpy puts the module's file first
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
        return
    path = os.path.abspath(target)
    sys.argv = [target, *args]
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    with open(path, "rb") as handle:
        code = compile(handle.read(), path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = path  # absolute, as Python 3.9+ sets it for a script
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


# tpumem's own code, the package and its adapters (a directory of the package's,
# or where they were imported from): the profiler's frames, never the program's;
# between the user's and the framework's, the hooks tpumem put there.
_ADAPTERS = os.path.dirname(os.path.abspath(__file__))
PROFILER_PLACES = (os.path.dirname(_ADAPTERS) + os.sep, _ADAPTERS + os.sep)


def user_traceback(error: BaseException, *ours: str) -> types.TracebackType | None:
    """The traceback from the user's code down, as `python script.py` prints it
    (`ours`: the files of the process's own frames above it), less the frames of
    tpumem's hooks: an interrupt that lands in one (Ctrl-C in a JAX loop) read as
    tpumem's crash, its traceback ending in tpumem's files."""
    tb = error.__traceback__
    skipped = (__file__, runpy.__file__, *ours)
    while tb is not None and tb.tb_frame.f_code.co_filename in skipped:
        tb = tb.tb_next
    kept: list[types.TracebackType] = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(PROFILER_PLACES):
            kept.append(tb)
        tb = tb.tb_next
    chained = None
    for frame in reversed(kept):  # (each frame as it was, linked without the hooks')
        chained = types.TracebackType(chained, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return chained
