"""A compiled program's HloProto in a trace row: an `hlo` row's text is JSON naming
where the program came from, with the proto's bytes compressed and in base64 (a
trace's text is UTF-8). Programs are few and their protos small beside the events,
so they travel inside the trace rather than beside it.

Beside the optimized proto, a row may carry the program as the framework handed
it to XLA (the dump's `before_optimizations` HloProto): what `--tpu` compiles
again for a TPU (tpu/compile.py).

A packed proto is decompressed no further than MAX_PROTO_BYTES: zlib turns a
row's megabyte into a gigabyte (of zeros, say), and a trace may be anyone's. A
row past the bound is left out, and the analysis warns once (hlo_warnings)."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterator
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


# The most bytes a packed proto may hold: four times the limit protobuf long put
# on a message it parses by default (64 MiB). An HloProto with its buffer
# assignment past this is no program a run compiles.
MAX_PROTO_BYTES = 256 << 20
OVERSIZED_ROWS = "hlo rows past the bound"  # the count of rows left out, once read


class _Oversized(Exception):
    """A packed proto that decompresses past MAX_PROTO_BYTES."""


def unpack(packed: object) -> bytes | None:
    """What pack() made; None for anything else, and for a proto that would
    decompress past MAX_PROTO_BYTES."""
    try:
        return _inflate(packed)
    except _Oversized:
        return None


def _inflate(packed: object) -> bytes | None:
    """What pack() made; None for anything else; _Oversized past the bound, found
    without decompressing further than one byte past it."""
    if not isinstance(packed, str):
        return None
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(base64.b64decode(packed, validate=True), MAX_PROTO_BYTES + 1)
    except (ValueError, zlib.error):  # (binascii.Error is a ValueError)
        return None
    if len(data) > MAX_PROTO_BYTES:
        raise _Oversized(f"decompresses past {MAX_PROTO_BYTES >> 20} MiB")
    return data if inflater.eof else None  # (not at its end: a stream cut short)


def hlo_row_text(
    origin: str, data: bytes, program_id: int | None = None, input_data: bytes | None = None
) -> str:
    record = {"origin": origin, "program_id": program_id, "encoding": "zlib+base64"}
    if input_data is not None:
        record["input_hlo_proto"] = pack(input_data)
    return json.dumps({**record, "hlo_proto": pack(data)})


def read_hlo_row(text: object) -> HloRow | None:
    """The row's proto bytes; None for a row cut short or not of this form;
    _Oversized for a proto past MAX_PROTO_BYTES."""
    record = parse_object(text)
    if record is None or record.get("encoding") != "zlib+base64":
        return None
    data, origin = _inflate(record.get("hlo_proto")), record.get("origin")
    if data is None:
        return None
    program_id = record.get("program_id")
    if not isinstance(program_id, int) or isinstance(program_id, bool):
        program_id = None
    origin = origin if isinstance(origin, str) else "?"
    return HloRow(origin, data, program_id, _inflate(record.get("input_hlo_proto")))


def hlo_rows(trace: Trace) -> Iterator[HloRow | None]:
    """Every `hlo` row of the trace, in the order written (None: one unreadable),
    one at a time (each may be large); a row past MAX_PROTO_BYTES is left out
    and counted for hlo_warnings."""
    oversized = 0
    for text in trace.texts_at(np.flatnonzero(trace.is_kind(HLO))):
        try:
            yield read_hlo_row(text)
        except _Oversized:
            oversized += 1
    trace.derived(OVERSIZED_ROWS, lambda: oversized)


def hlo_warnings(trace: Trace) -> list[str]:
    """One warning for the rows hlo_rows left out: their count, kept when it
    read them all (else read here)."""

    def read_all() -> int:
        for _ in hlo_rows(trace):
            pass
        return trace.derived(OVERSIZED_ROWS, lambda: 0)

    oversized = trace.derived(OVERSIZED_ROWS, read_all)
    if not oversized:
        return []
    return [
        f"left out {oversized:,} compiled programs (hlo rows) that decompress past "
        f"{MAX_PROTO_BYTES >> 20} MiB, more than any program a run compiles"
    ]
