"""Compiled programs' memory, as XLA's own analysis gave it when each compiled:
argument, output, alias (outputs that reuse a donated argument), temp and
generated-code bytes per device. These are compile-time figures, not a
measurement of a run."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pyarrow as pa

from tpumem.trace.model import Trace
from tpumem.trace.records import ProgramRecord, decode_record, parse_object
from tpumem.trace.schema import PROGRAM


@dataclass(frozen=True, slots=True)
class ProgramMemory(ProgramRecord):
    """A program's row as the trace holds it, and when it compiled."""

    compiled_at_ns: int = 0


def programs(trace: Trace) -> tuple[ProgramMemory, ...]:
    """Every compiled program the trace recorded, in the order they compiled."""
    rows = np.flatnonzero(trace.is_kind(PROGRAM))
    if not len(rows):
        return ()
    times = trace.numbers("time_ns")[rows]
    texts = trace.table.column("text").take(pa.array(rows)).to_pylist()
    result = []
    for time_ns, text in zip(times.tolist(), texts, strict=True):
        record = parse_object(text)
        if record is None:
            continue  # a row cut short by a crash: nothing to show
        program = decode_record(ProgramMemory, record, "program", [])
        result.append(replace(program, compiled_at_ns=int(time_ns)))
    return tuple(sorted(result, key=lambda p: p.compiled_at_ns))


def largest_temp(found: tuple[ProgramMemory, ...]) -> ProgramMemory | None:
    with_temp = [p for p in found if p.temp_bytes]
    return max(with_temp, key=lambda p: p.temp_bytes or 0, default=None)
