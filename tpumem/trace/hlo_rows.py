"""A compiled program's HloProto in a trace row: an `hlo` row's text is JSON naming
where the program came from, with the proto's bytes compressed and in base64 (a
trace's text is UTF-8). Programs are few and their protos small beside the events,
so they travel inside the trace rather than beside it.

Beside the optimized proto, a row may carry the program as the framework handed
it to XLA (the dump's `before_optimizations` HloProto): what `--tpu` compiles
again for a TPU (tpu/compile.py)."""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from dataclasses import dataclass

import numpy as np

from tpumem.trace.model import Trace
from tpumem.trace.records import parse_object
from tpumem.trace.schema import HLO


@dataclass(frozen=True, slots=True)
class HloRow:
    origin: str  # the dump file or profile it was read from
    data: bytes  # the serialized HloProto
    program_id: int | None = None  # XLA's id for it (the dump's module number)
    input_data: bytes | None = None  # the HloProto before XLA's optimizations


def pack(data: bytes) -> str:
    """Bytes as a trace row's text carries them."""
    return base64.b64encode(zlib.compress(data, 6)).decode("ascii")


def unpack(packed: object) -> bytes | None:
    """What pack() made; None for anything else."""
    if not isinstance(packed, str):
        return None
    try:
        return zlib.decompress(base64.b64decode(packed, validate=True))
    except (binascii.Error, ValueError, zlib.error):
        return None


def hlo_row_text(
    origin: str, data: bytes, program_id: int | None = None, input_data: bytes | None = None
) -> str:
    record = {"origin": origin, "program_id": program_id, "encoding": "zlib+base64"}
    if input_data is not None:
        record["input_hlo_proto"] = pack(input_data)
    return json.dumps({**record, "hlo_proto": pack(data)})


def read_hlo_row(text: object) -> HloRow | None:
    """The row's proto bytes; None for a row cut short or not of this form."""
    record = parse_object(text)
    if record is None or record.get("encoding") != "zlib+base64":
        return None
    data, origin = unpack(record.get("hlo_proto")), record.get("origin")
    if data is None:
        return None
    program_id = record.get("program_id")
    if not isinstance(program_id, int) or isinstance(program_id, bool):
        program_id = None
    origin = origin if isinstance(origin, str) else "?"
    return HloRow(origin, data, program_id, unpack(record.get("input_hlo_proto")))


def hlo_rows(trace: Trace) -> list[HloRow | None]:
    """Every `hlo` row of the trace, in the order written (None: one unreadable)."""
    return [read_hlo_row(text) for text in trace.texts_at(np.flatnonzero(trace.is_kind(HLO)))]
