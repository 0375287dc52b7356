"""The user's source line behind an allocation: the first frame that is neither
a framework's or a library's (installed in site-packages; a known ML library
wherever it lies; any code under a path entry that does not hold the user's own
directory: a checkout put on PYTHONPATH), the standard library's nor tpumem's."""

from __future__ import annotations

import os
import sys
import sysconfig
import types

from tpumem.adapters.script_target import PROFILER_PLACES
from tpumem.trace.source_paths import LIBRARY_DIRS, library_file, user_path

# Frames from these places are a framework's or tpumem's, not the user's: the
# environment's scripts too (`pytest`, `accelerate`: launchers, never the code
# they launch).
_NOT_USER = (
    *LIBRARY_DIRS,
    *PROFILER_PLACES,
    sysconfig.get_paths()["stdlib"] + os.sep,
    sysconfig.get_paths()["scripts"] + os.sep,
    "<frozen ",
)
# Directories of the user's code that neither the working directory nor the
# script tells: the test files' under tpumem's pytest plugin (pytest puts them
# on sys.path, where they would read as a library's).
OWN_DIRECTORIES: set[str] = set()


class SourceLines:
    """The user's file:line that called into the framework, walking up from a
    frame; answers are cached by code object, so a walk costs a few dict lookups."""

    def __init__(self) -> None:
        # By the code's id (a code object hashes its constants at every lookup),
        # the codes held so that an id is not reused.
        self._names: dict[int, str | None] = {}  # None: not user code
        self._codes: list[types.CodeType] = []
        self._cwd = os.getcwd()
        script = sys.argv[0] if sys.argv else ""
        self._own = {self._cwd, *OWN_DIRECTORIES}  # the directories of the user's code
        if script and os.path.isfile(script):
            self._own.add(os.path.dirname(os.path.abspath(script)))

    def __call__(self, frame: types.FrameType | None) -> str | None:
        names = self._names
        while frame is not None:
            code = frame.f_code
            name = names.get(id(code), "")
            if name == "":
                self._codes.append(code)
                name = names[id(code)] = self.name(code.co_filename)
            if name is not None:
                return f"{name}:{frame.f_lineno}"
            frame = frame.f_back
        return None

    def file_line(self, text: str) -> str | None:
        """'path:line' as the user's file:line, or None when it is not the user's."""
        filename, _, line = text.rpartition(":")
        name = self.name(filename)
        return f"{name}:{line}" if name is not None else None

    def name(self, filename: str) -> str | None:
        """The user's name for a file of theirs; None for anyone else's."""
        cell = _notebook_cell(filename)
        if cell is not None:
            return cell
        if any(part in filename for part in _NOT_USER) or filename.startswith("<"):
            return None
        if library_file(os.path.abspath(filename)) or self._on_library_path(filename):
            return None
        # Relative to the working directory, as the user typed the script's path,
        # unless that climbs far out of it.
        return user_path(filename, self._cwd)

    def _on_library_path(self, filename: str) -> bool:
        """Whether the file lies under an entry of sys.path outside the user's
        directories (the working directory, the script's): a library checked out
        and put on PYTHONPATH, whatever its name. An entry above them or inside
        them (tests/, src/) holds the user's own code."""
        path = os.path.abspath(filename)
        for entry in sys.path:
            if not entry:
                continue
            root = os.path.abspath(entry)
            if any(_related(own, root) for own in self._own):
                continue
            if path.startswith(root + os.sep):
                return True
        return False


def _related(one: str, other: str) -> bool:
    """Whether one directory is the other, or lies above or inside it."""
    return one == other or one.startswith(other + os.sep) or other.startswith(one + os.sep)


def _notebook_cell(filename: str) -> str | None:
    """A notebook cell's code, as the notebook numbers it ("In [3]"): IPython
    compiles each cell under a temporary file name that says nothing."""
    if "IPython" not in sys.modules:
        return None
    shell = sys.modules["IPython"].get_ipython()
    cells = getattr(getattr(shell, "compile", None), "_filename_map", None)
    number = cells.get(filename) if isinstance(cells, dict) else None
    return f"In [{number}]" if number is not None else None
