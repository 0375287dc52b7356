"""The Python call stack behind each buffer, interned as memray interns them: a
distinct stack is written once, as a `stack` row, and a buffer's row names it by
its id, so a loop that makes a million buffers from one line adds one stack.

By default a stack holds the user's frames only (SourceLines' rule: frameworks,
libraries, the standard library and tpumem left out); `native_frames` keeps the
libraries' and the standard library's too. tpumem's own frames and the runner's
(runpy) are never kept: they are the profiler, not the program.
"""

from __future__ import annotations

import linecache
import os
import sysconfig
import threading
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from tpumem.adapters.script_target import PROFILER_PLACES
from tpumem.adapters.source_lines import SourceLines
from tpumem.trace.schema import STACK
from tpumem.trace.stack_rows import stack_text
from tpumem.trace.writer import TraceWriter

# Where a user's buffer was made: (file:line of the innermost user frame, stack id).
Where = tuple[str | None, int | None]
NOWHERE: Where = (None, None)
# A kept frame, named: (file as reports show it, line, function).
NamedFrame = tuple[str, int, str]

# Frames beyond this many (deep recursion) are left out, outermost first.
MAX_FRAMES = 128
_LIBRARY_ROOTS = (os.sep + "site-packages" + os.sep, os.sep + "dist-packages" + os.sep)
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
_RUNPY = ("runpy.py", "<frozen runpy>")
# Code objects whose frames end a walk: the runner's call of the script, beyond
# which every frame is the runner's or runpy's, none of them kept. Without it, a
# walk from an eager JAX call visited twice as many frames as it kept.
_OUTERMOST: set[int] = set()
_OUTSIDE = "<outside>"  # a code's name in CallStacks._names: the walk ends there
_UNSEEN = object()  # a code not in CallStacks._names yet


def end_walks_at(code: types.CodeType) -> None:
    """Frames of `code` and beyond are never kept (they run the program): walks
    stop there. The code object must live as long as the process (a function's)."""
    _OUTERMOST.add(id(code))


class CallStacks:
    """`stacks(frame)` -> Where: the user's line and the interned stack, walking
    out from `frame`. Frames are named once per code object, stacks interned by
    their (code, line) pairs: a walk costs a dict lookup per frame."""

    def __init__(
        self, writer: TraceWriter, native_frames: bool = False, enabled: bool = True
    ) -> None:
        """`enabled=False`: the user's source line only, no stack (--no-stacks)."""
        self._writer = writer
        self.enabled = enabled
        self._native = native_frames
        self._lines = SourceLines()
        # Code objects by id, not by themselves: a code object's hash is computed
        # from its constants on every lookup (8 us for a module's), and the walk
        # looks up every frame. The codes are held here, so an id is never reused.
        self._names: dict[int, str | None] = {}  # None: not kept
        self._codes: dict[int, types.CodeType] = {}
        self._files: dict[str, str | None] = {}
        self._user_files: dict[str, str] = {}  # the names of the user's files -> their paths
        self._by_codes: dict[tuple, Where] = {}
        self._by_frames: dict[tuple[NamedFrame, ...], Where] = {}
        self._by_captured: dict[tuple, Where] = {}
        self._file_codes: dict[str, list[types.CodeType]] = {}
        self._qualnames: dict[tuple[str, int, str], str] = {}
        self._frames: list[tuple[NamedFrame, ...]] = []  # by stack id
        self._lock = threading.Lock()

    def __call__(self, frame: types.FrameType | None) -> Where:
        if not self.enabled:
            return (self._lines(frame), None)
        key = self._walk(frame)
        if not key:
            return NOWHERE
        found = self._by_codes.get(key)
        if found is None:
            found = self._by_codes[key] = self.intern(self._named(key))
        return found

    def frames_at(self, frame: types.FrameType | None) -> tuple[NamedFrame, ...]:
        """The kept frames from `frame` out, outermost first, not interned."""
        return self._named(self._walk(frame))

    def _walk(self, frame: types.FrameType | None) -> tuple:
        """(code id, offset, code id, offset, ...) of the kept frames, innermost
        first: the hot path, a dict lookup per frame. A frame's place is its last
        instruction's offset, not its line: Python finds a line by scanning the
        code's line table from the start (4 us in a 300-line function, 0.1 us for
        the offset), so lines are found once, when a stack is first seen."""
        names = self._names
        key: list = []
        while frame is not None:
            code = frame.f_code
            name = names.get(id(code), _UNSEEN)
            if name is None:  # not kept: most frames (libraries')
                frame = frame.f_back
                continue
            if name is _UNSEEN:  # named now (never _UNSEEN), then looked at again
                self._code_name(code)
                continue
            if name is _OUTSIDE:
                break
            key.append(id(code))
            key.append(frame.f_lasti)
            if len(key) == 2 * MAX_FRAMES:
                break
            frame = frame.f_back
        return tuple(key)

    def _code_name(self, code: types.CodeType) -> str | None:
        self._codes[id(code)] = code
        outside = id(code) in _OUTERMOST
        name = self._names[id(code)] = _OUTSIDE if outside else self._file_name(code.co_filename)
        return name

    def _named(self, key: tuple) -> tuple[NamedFrame, ...]:
        pairs = zip(key[-2::-2], key[-1::-2], strict=True)  # outermost first
        names, codes = self._names, self._codes
        return tuple(  # (a kept frame's name is never None)
            (cast(str, names[code]), _line(codes[code], offset), _code_qualname(codes[code]))
            for code, offset in pairs
        )

    def named(self, frames: Iterable[tuple[str, int, str]]) -> tuple[NamedFrame, ...]:
        """(filename, line, function) frames, outermost first, as kept and named
        here (stacks a framework recorded itself, such as TensorFlow's ops'). A
        framework names a function as its code does (`forward`); it is named
        here as the interpreter does (`Block.forward`), as a walk names it."""
        kept = []
        for filename, line, function in frames:
            name = self._file_name(filename)
            if name is not None:
                kept.append((name, line, self._qualname(filename, line, function)))
        return tuple(kept[-MAX_FRAMES:])

    def captured(self, frames: Sequence[Mapping[str, Any]]) -> Where:
        """The Where of a stack PyTorch captured and named itself
        (`symbolize_tracebacks`: name, filename and line, innermost first)."""
        key = tuple((f["filename"], f["line"], f["name"]) for f in frames)
        found = self._by_captured.get(key)
        if found is None:
            named = self.named(reversed(key))
            where = self.intern(named) if self.enabled else (self._source(named), None)
            found = self._by_captured[key] = where
        return found

    def _qualname(self, filename: str, line: int, function: str) -> str:
        key = (filename, line, function)
        found = self._qualnames.get(key)
        if found is None:
            codes = self._file_codes.get(filename)
            if codes is None:
                codes = self._file_codes[filename] = _codes_in(filename)
            found = self._qualnames[key] = _qualname(codes, line, function)
        return found

    def intern(self, frames: tuple[NamedFrame, ...]) -> Where:
        """The Where of a stack of named frames (outermost first), written the
        first time it is seen."""
        if not frames:
            return NOWHERE
        found = self._by_frames.get(frames)
        if found is not None:
            return found
        with self._lock:
            found = self._by_frames.get(frames)
            if found is not None:
                return found
            source = self._source(frames)
            stack_id = len(self._frames)
            self._frames.append(frames)
            # The user's lines of code go with their frames: a later version of the
            # script, with lines moved, is still matched line for line (tpumem diff).
            code = [self._code(name, line) for name, line, _ in frames]
            self._writer.record(STACK, stack=stack_id, text=stack_text(frames, code))
            found = self._by_frames[frames] = (source, stack_id)
            return found

    def record(self, kind: str, **values: Any) -> None:
        """A row of the trace the stacks go to (rows that name stacks by id)."""
        self._writer.record(kind, **values)

    def _source(self, frames: tuple[NamedFrame, ...]) -> str | None:
        """The innermost user frame's file:line."""
        user = [f for f in frames if f[0] in self._user_files]
        return f"{user[-1][0]}:{user[-1][1]}" if user else None

    def _code(self, name: str, line: int) -> str:
        path = self._user_files.get(name)
        return linecache.getline(path, line).strip() if path is not None else ""

    def frames(self, stack_id: int | None) -> tuple[NamedFrame, ...]:
        return self._frames[stack_id] if stack_id is not None else ()

    def _file_name(self, filename: str) -> str | None:
        name = self._files.get(filename, "")
        if name != "":
            return name
        name = self._lines.name(filename)
        if name is not None:
            self._user_files[name] = filename
        elif self._native and not _profiler(filename):
            name = _library_name(filename)
        self._files[filename] = name
        return name


def _profiler(filename: str) -> bool:
    """tpumem's own frames and the runner's: never the program's."""
    return filename.startswith(PROFILER_PLACES) or filename.endswith(_RUNPY)


def _library_name(filename: str) -> str:
    """A library's file as its package path (jax/_src/dispatch.py), a standard
    library module's as its path in the standard library."""
    for root in _LIBRARY_ROOTS:
        if root in filename:
            return filename.rsplit(root, 1)[1]
    if filename.startswith(_STDLIB):
        return filename[len(_STDLIB) :]
    return filename


def _line(code: types.CodeType, offset: int) -> int:
    """The line of the instruction at `offset` in `code`, as a frame's f_lineno
    gives it (the function's first line where the instruction has none)."""
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return line if line is not None else code.co_firstlineno
    return code.co_firstlineno


def _codes_in(filename: str) -> list[types.CodeType]:
    """Every code object compiled from a file's source as linecache has it (a
    notebook's cells too); none where there is no source or it does not compile."""
    try:
        module = compile("".join(linecache.getlines(filename)), filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return []
    codes, pending = [], [module]
    while pending:
        code = pending.pop()
        codes.append(code)
        pending.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
    return codes


def _qualname(codes: list[types.CodeType], line: int, function: str) -> str:
    """The qualified name of the function `function` whose code has `line` (of
    two, the inner one); the plain name where none has."""
    found = [
        code
        for code in codes
        if code.co_name == function and any(at == line for _, _, at in code.co_lines())
    ]
    if not found:
        return function
    return _code_qualname(max(found, key=lambda code: code.co_firstlineno))


def _code_qualname(code: types.CodeType) -> str:
    # co_qualname came with Python 3.11; 3.10's code has its bare name only.
    return getattr(code, "co_qualname", code.co_name)
