"""Compiled programs' memory, as XLA's own analysis gave it when each compiled:
argument, output, alias (outputs that reuse a donated argument), temp and
generated-code bytes per device. These are compile-time figures, not a
measurement of a run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from tpumem.trace.model import Trace
from tpumem.trace.records import ProgramRecord, decode_record, parse_object
from tpumem.trace.schema import PROGRAM


@dataclass(frozen=True, slots=True)
class ProgramMemory:
    name: str
    devices: tuple[str, ...]
    argument_bytes: int | None
    output_bytes: int | None
    alias_bytes: int | None
    temp_bytes: int | None
    generated_code_bytes: int | None
    compiled_at_ns: int
    unavailable: str | None = None  # why the backend gave no analysis


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
        program: ProgramRecord = decode_record(ProgramRecord, record, "program", [])
        result.append(
            ProgramMemory(
                name=program.name,
                devices=program.devices,
                argument_bytes=program.argument_bytes,
                output_bytes=program.output_bytes,
                alias_bytes=program.alias_bytes,
                temp_bytes=program.temp_bytes,
                generated_code_bytes=program.generated_code_bytes,
                compiled_at_ns=int(time_ns),
                unavailable=program.unavailable,
            )
        )
    return tuple(sorted(result, key=lambda p: p.compiled_at_ns))


def largest_temp(found: tuple[ProgramMemory, ...]) -> ProgramMemory | None:
    with_temp = [p for p in found if p.temp_bytes]
    return max(with_temp, key=lambda p: p.temp_bytes or 0, default=None)
