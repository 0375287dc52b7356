"""Steps where nothing marked them: the repeated calls of one compiled program.

A loop that calls a jitted step and marks nothing (no StepTraceAnnotation, no
Keras, no optimizer the adapter knows) still repeats: every call of the step's
program makes its arrays at one moment (the book's rows of one call share their
time). The program called at least `least` times whose calls make the most
bytes (the median call's) stands for the loop's step; each of its calls starts
a step. A helper program called as often (a cast, a slice) makes fewer bytes
than the step it sits beside.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis.compiled.programs import CompiledProgram, programs, programs_named
from tpumem.analysis.device_events import DeviceEvents
from tpumem.trace.model import Trace


@dataclass(frozen=True, slots=True)
class CallSteps:
    program: str  # the op its arrays' rows carry (the function's name)
    times: np.ndarray  # each call's time, in order
    numbers: np.ndarray  # 0, 1, 2, ... (the calls, counted)


def call_steps(trace: Trace, events: DeviceEvents, least: int) -> CallSteps | None:
    """The calls of the program standing for the step on this device, where
    one program is called at least `least` times; None otherwise."""
    made = np.flatnonzero(events.is_alloc)
    if len(made) < least:
        return None
    codes, names = trace.codes_at("op", events.row[made])
    compiled = trace.derived("programs by name", lambda: _compiled(trace))
    best: tuple[float, int, str, np.ndarray] | None = None
    for code in np.unique(codes[codes >= 0]).tolist():
        name = names[code]
        if not isinstance(name, str) or not programs_named(name, compiled):
            continue
        mine = made[codes == code]
        times, call_of = np.unique(events.time_ns[mine], return_inverse=True)
        if len(times) < least:
            continue
        per_call = float(np.median(np.bincount(call_of, weights=events.bytes[mine])))
        key = (per_call, len(times), name, times)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None:
        return None
    times = best[3]
    return CallSteps(best[2], times, np.arange(len(times), dtype=np.int64))


def _compiled(trace: Trace) -> tuple[CompiledProgram, ...]:
    """The trace's programs as names to match ops to (read once, every device's)."""
    return tuple(
        CompiledProgram(p.module or p.name, p, None) for p in programs(trace) if p.name != "?"
    )
