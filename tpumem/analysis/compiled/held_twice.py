"""A compiled call whose outputs replace arrays the caller drops after it: both
live at once, the outputs' bytes held twice (`state = update(state)` with
nothing donated). What `donate_argnums` gives back, found by what happens in
the run, never by what the arguments are called.

At the device's peak: the arrays one call of a program made (its rows share
the call's time), each matched by dtype and shape to an array made before the
call that is freed after the peak and before the program's next call (the
caller dropped it once the call returned; a program's last call, after which
frees may be the run's end, is not read), and to an argument of the program's
plan of that dtype and shape that no output takes the memory of (not donated).
Held twice: the matched outputs' bytes. The arguments, by number, name the
`donate_argnames` (JAX's metadata names a parameter after the Python argument
it is part of).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis.compiled.program_heap import PARAMETER, HeapBuffer
from tpumem.analysis.compiled.programs import CompiledProgram, programs_named
from tpumem.analysis.device_events import DeviceEvents
from tpumem.hlo.shapes import numpy_dtype
from tpumem.trace.model import Trace


@dataclass(frozen=True, slots=True)
class HeldTwice:
    program: CompiledProgram
    bytes: int  # the outputs' bytes whose arguments were live beside them
    arguments: tuple[HeapBuffer, ...]  # the plan's parameters they replace


def held_twice(
    trace: Trace,
    events: DeviceEvents,
    peak_index: int,
    live: np.ndarray,
    compiled: tuple[CompiledProgram, ...],
) -> tuple[HeldTwice, ...]:
    """Per program with a call's outputs live at the peak (`live`: the
    allocations live there, indices into `events`), largest first."""
    if not len(live) or not compiled:
        return ()
    made = np.flatnonzero(events.is_alloc)
    op_codes, op_names = trace.codes_at("op", events.row[made])
    code_of = np.full(len(events), -1, np.int64)
    code_of[made] = op_codes
    dtypes, dtype_names = trace.codes_at("dtype", events.row[live])
    shapes, shape_names = trace.codes_at("shape", events.row[live])
    ends = events.ends()[live]
    times = events.time_ns[live]
    freed = ends < len(events)
    end_times = np.where(freed, events.time_ns[np.minimum(ends, len(events) - 1)], -1)
    found = []
    for code in np.unique(code_of[live][code_of[live] >= 0]).tolist():
        named = programs_named(str(op_names[code]), compiled)
        if not named:
            continue
        mine = code_of[live] == code
        call = int(times[mine].max())
        outputs = np.flatnonzero(mine & (times == call))
        later = made[(op_codes == code) & (events.time_ns[made] > call)]
        if not len(later):
            continue  # (its last call: what is freed after it may be the run's end)
        next_call = int(events.time_ns[later[0]])
        # (Made before this call: the program's own earlier outputs among them,
        # the state an update gave back last time.)
        dropped = np.flatnonzero((times < call) & freed & (end_times <= next_call))
        by_shape: dict[tuple[str, str], list[int]] = {}
        for i in dropped.tolist():
            key = _labels(i, dtypes, dtype_names, shapes, shape_names)
            if key is not None:
                by_shape.setdefault(key, []).append(i)
        for program in named:
            twice = _matched(program, outputs, by_shape, dtypes, dtype_names, shapes, shape_names)
            if twice is not None:
                size = int(sum(events.bytes[live[i]] for i in twice[0]))
                found.append(HeldTwice(program, size, twice[1]))
                break
    return tuple(sorted(found, key=lambda h: -h.bytes))


def _matched(
    program: CompiledProgram,
    outputs: np.ndarray,
    dropped: dict[tuple[str, str], list[int]],
    dtypes: np.ndarray,
    dtype_names: list[str],
    shapes: np.ndarray,
    shape_names: list[str],
) -> tuple[list[int], tuple[HeapBuffer, ...]] | None:
    """(the outputs matched, the plan's parameters they replace), or None."""
    heap = program.heap
    if heap is None:
        return None
    parameters: dict[tuple[str, str], list[HeapBuffer]] = {}
    for buffer in sorted(heap.whole_values, key=lambda b: b.parameter_number):
        if buffer.group == PARAMETER and not buffer.live_out:
            parameters.setdefault((numpy_dtype(buffer.dtype), buffer.dims), []).append(buffer)
    left = {shape: list(indices) for shape, indices in dropped.items()}
    matched, replaced = [], []
    for i in outputs.tolist():
        key = _labels(i, dtypes, dtype_names, shapes, shape_names)
        if key is not None and left.get(key) and parameters.get(key):
            left[key].pop(0)
            replaced.append(parameters[key].pop(0))
            matched.append(i)
    return (matched, tuple(replaced)) if matched else None


def _labels(
    i: int, dtypes: np.ndarray, dtype_names: list[str], shapes: np.ndarray, shape_names: list[str]
) -> tuple[str, str] | None:
    """An allocation's (dtype, shape), None where the row has either unknown."""
    if dtypes[i] < 0 or shapes[i] < 0:
        return None
    return str(dtype_names[dtypes[i]]), str(shape_names[shapes[i]])
