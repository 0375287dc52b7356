"""Protobuf encoding of many messages of one shape at once, column-wise in numpy.

An export writes every allocation of a trace as an XEvent with a dozen stats: a
million events are fifteen million small messages, far too many to build one by
one in Python. Here every varint of a column is written with the same width, the
width its largest value needs (smaller values get redundant continuation bytes,
which protobuf parsers read as the same number), so all messages of a batch have
one layout and a batch is a byte matrix filled a column at a time.
"""

from __future__ import annotations

import numpy as np

VARINT, FIXED64, LENGTH = 0, 1, 2


def varint_bytes(value: int) -> bytes:
    """A single varint; negative numbers as protobuf writes int64 (ten bytes)."""
    value &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while True:
        low = value & 0x7F
        value >>= 7
        if not value:
            out.append(low)
            return bytes(out)
        out.append(low | 0x80)


def tag(field: int, wire_type: int) -> bytes:
    return varint_bytes(field << 3 | wire_type)


def varints(values: np.ndarray) -> np.ndarray:
    """(rows, width): each value as a varint of the width the largest needs
    (int64 values as their two's complement, as protobuf writes int64)."""
    words = np.ascontiguousarray(values, dtype=np.int64).view(np.uint64)
    top = int(words.max(initial=0))
    width = max(1, -(-top.bit_length() // 7))
    out = np.empty((len(words), width), np.uint8)
    for k in range(width):
        out[:, k] = (words >> np.uint64(7 * k)) & np.uint64(0x7F)
    out[:, : width - 1] |= 0x80
    return out


def doubles(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype="<f8").view(np.uint8).reshape(-1, 8)


def record(rows: int, parts: list[bytes | np.ndarray]) -> np.ndarray:
    """(rows, width): the parts side by side; bytes are the same in every row."""
    blocks = [
        np.broadcast_to(np.frombuffer(p, np.uint8), (rows, len(p))) if isinstance(p, bytes) else p
        for p in parts
    ]
    return np.concatenate(blocks, axis=1) if blocks else np.empty((rows, 0), np.uint8)


def field(number: int, rows: np.ndarray) -> np.ndarray:
    """Each row as a length-delimited field `number` (an embedded message)."""
    prefix = tag(number, LENGTH) + varint_bytes(rows.shape[1])
    return record(rows.shape[0], [prefix, rows])
