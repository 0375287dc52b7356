"""A compiled program's HloProto in a trace row: an `hlo` row's text is JSON naming
where the program came from, with the proto's bytes compressed and in base64 (a
trace's text is UTF-8). Programs are few and their protos small beside the events,
so they travel inside the trace rather than beside it."""

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


def hlo_row_text(origin: str, data: bytes, program_id: int | None = None) -> str:
    packed = base64.b64encode(zlib.compress(data, 6)).decode("ascii")
    record = {"origin": origin, "program_id": program_id, "encoding": "zlib+base64"}
    return json.dumps({**record, "hlo_proto": packed})


def read_hlo_row(text: object) -> HloRow | None:
    """The row's proto bytes; None for a row cut short or not of this form."""
    record = parse_object(text)
    if record is None or record.get("encoding") != "zlib+base64":
        return None
    packed, origin = record.get("hlo_proto"), record.get("origin")
    if not isinstance(packed, str):
        return None
    try:
        data = zlib.decompress(base64.b64decode(packed, validate=True))
    except (binascii.Error, ValueError, zlib.error):
        return None
    program_id = record.get("program_id")
    if not isinstance(program_id, int) or isinstance(program_id, bool):
        program_id = None
    return HloRow(origin if isinstance(origin, str) else "?", data, program_id)


def hlo_rows(trace: Trace) -> list[HloRow | None]:
    """Every `hlo` row of the trace, in the order written (None: one unreadable)."""
    return [read_hlo_row(text) for text in trace.texts_at(np.flatnonzero(trace.is_kind(HLO)))]
