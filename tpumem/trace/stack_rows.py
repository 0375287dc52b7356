"""The call stacks a trace holds: each `stack` row interns one (its id in the
`stack` column, its frames in `text` as JSON, outermost first, each
[file, line, function] or [file, line, function, code], code being the line's
text where the capture could read it); a buffer's row names its stack by that id."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tpumem.trace.model import Trace
from tpumem.trace.records import parse_object
from tpumem.trace.schema import OP_STACKS, STACK


@dataclass(frozen=True, slots=True)
class Frame:
    file: str
    line: int
    function: str
    code: str = ""  # the line's text, stripped; "" where not read

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"


Stack = tuple[Frame, ...]  # outermost first


def stack_text(frames: Sequence[tuple[str, int, str]], code: Sequence[str] = ()) -> str:
    """A stack row's text; `code`: each frame's line of code, where read."""
    if any(code):
        return json.dumps([[*frame, text] for frame, text in zip(frames, code, strict=True)])
    return json.dumps([list(frame) for frame in frames])


def read_stack(text: object) -> Stack | None:
    """The frames of a stack row's text; None for text not of that form."""
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # (JSON nested deeper than Python parses)
        return None
    if not isinstance(value, list) or not value:
        return None
    frames = []
    for item in value:
        if not (isinstance(item, list) and len(item) in (3, 4)):
            return None
        file, line, function, *code = item
        if not (
            isinstance(file, str)
            and isinstance(function, str)
            and isinstance(line, int)
            and not isinstance(line, bool)
            and all(isinstance(text, str) for text in code)
        ):
            return None
        frames.append(Frame(file, line, function, *code))
    return tuple(frames)


def call_stacks(trace: Trace) -> tuple[dict[int, Stack], int]:
    """The trace's stacks by id, and how many rows were not readable stacks (a
    damaged file): their buffers read as having no stack."""

    def read() -> tuple[dict[int, Stack], int]:
        rows = np.flatnonzero(trace.is_kind(STACK))
        ids = trace.numbers_at("stack", rows, -1) if len(rows) else np.zeros(0, np.int64)
        stacks, unreadable = {}, 0
        for stack_id, text in zip(ids.tolist(), trace.texts_at(rows), strict=True):
            stack = read_stack(text)
            if stack is None or stack_id < 0:
                unreadable += 1
            else:
                stacks[stack_id] = stack
        return stacks, unreadable

    return trace.derived("call stacks", read)


def op_stacks(trace: Trace) -> tuple[dict[str, dict[str, int]], int]:
    """Each compiled function's ops and the ids of the stacks that built them
    (TensorFlow's, whose XLA programs name their ops after the function's ops
    but give no line of the user's), and how many rows were not of that form
    (left out: those programs keep XLA's lines)."""

    def read() -> tuple[dict[str, dict[str, int]], int]:
        found: dict[str, dict[str, int]] = {}
        unreadable = 0
        for text in trace.texts_at(np.flatnonzero(trace.is_kind(OP_STACKS))):
            record = parse_object(text)
            function = record.get("function") if record is not None else None
            stacks = record.get("stacks") if record is not None else None
            if not isinstance(function, str) or not isinstance(stacks, dict):
                unreadable += 1
                continue
            found.setdefault(function, {}).update(
                (op, stack)
                for op, stack in stacks.items()
                if isinstance(stack, int) and not isinstance(stack, bool) and stack >= 0
            )
        return found, unreadable

    return trace.derived("op stacks", read)
