"""Protobuf wire-format decoding for many small messages at once, in numpy.

A profile holds hundreds of thousands of events, each with a dozen stats. Walking
them one Python object at a time costs seconds; here every message of a batch
advances one field per numpy pass, so the passes number the fields of the longest
message (about 20), not the messages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


class WireError(ValueError):
    """The bytes are not a valid protobuf encoding."""


@dataclass(frozen=True, slots=True)
class Fields:
    """One row per field found: which message, its number, its value. For
    length-delimited fields `start`/`length` locate the payload; for the others
    `value` holds the raw varint or fixed-width bits."""

    message: np.ndarray
    number: np.ndarray
    wire_type: np.ndarray
    value: np.ndarray
    start: np.ndarray
    length: np.ndarray

    def select(self, mask: np.ndarray) -> Fields:
        return Fields(
            self.message[mask],
            self.number[mask],
            self.wire_type[mask],
            self.value[mask],
            self.start[mask],
            self.length[mask],
        )


def read_varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decodes one varint at each position; returns (values, positions after)."""
    values = np.zeros(len(pos), dtype=np.uint64)
    after = pos.astype(np.int64, copy=True)
    todo = np.arange(len(pos))
    size = len(buf)
    for byte_index in range(10):
        where = after[todo]
        if len(where) and where.max() >= size:
            raise WireError("a varint runs past the end of its buffer")
        byte = buf[where]
        values[todo] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * byte_index)
        after[todo] += 1
        todo = todo[(byte & 0x80) != 0]
        if len(todo) == 0:
            return values, after
    raise WireError("a varint is longer than 10 bytes")


def _read_fixed(buf: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    if len(pos) and pos.max() + width > len(buf):
        raise WireError("a fixed-width field runs past the end of its buffer")
    raw = buf[pos[:, None] + np.arange(width)]
    return raw.copy().view("<u8" if width == 8 else "<u4").ravel().astype(np.uint64)


def scan(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> Fields:
    """The fields of the messages buf[starts[i]:ends[i]], in file order per message."""
    parts: list[tuple[np.ndarray, ...]] = []
    pos = starts.astype(np.int64, copy=True)
    todo = np.flatnonzero(pos < ends)
    while len(todo):
        tag, after = read_varints(buf, pos[todo])
        number = (tag >> np.uint64(3)).astype(np.int64)
        wire_type = (tag & np.uint64(7)).astype(np.uint8)
        value = np.zeros(len(todo), dtype=np.uint64)
        start = np.zeros(len(todo), dtype=np.int64)
        length = np.zeros(len(todo), dtype=np.int64)
        known = np.isin(wire_type, (VARINT, FIXED64, LENGTH, FIXED32))
        if not known.all():
            raise WireError(f"unsupported wire type {int(wire_type[~known][0])}")
        for kind, handler in (
            (VARINT, lambda p: read_varints(buf, p)),
            (FIXED64, lambda p: (_read_fixed(buf, p, 8), p + 8)),
            (FIXED32, lambda p: (_read_fixed(buf, p, 4), p + 4)),
        ):
            rows = np.flatnonzero(wire_type == kind)
            if len(rows):
                value[rows], after[rows] = handler(after[rows])
        rows = np.flatnonzero(wire_type == LENGTH)
        if len(rows):
            size, payload = read_varints(buf, after[rows])
            length[rows] = size.astype(np.int64)
            start[rows] = payload
            after[rows] = payload + length[rows]
        if (after > ends[todo]).any() or (number <= 0).any():
            raise WireError("a field runs past the end of its message")
        parts.append((todo, number, wire_type, value, start, length))
        pos[todo] = after
        todo = todo[after < ends[todo]]
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return Fields(empty, empty, empty.astype(np.uint8), empty.astype(np.uint64), empty, empty)
    columns = [np.concatenate(column) for column in zip(*parts, strict=True)]
    return Fields(*columns)


def as_int64(raw: np.ndarray) -> np.ndarray:
    """Varint bits read as a two's-complement int64 (protobuf int64 fields)."""
    return raw.view(np.int64)


def as_double(raw: np.ndarray) -> np.ndarray:
    """Fixed64 bits read as a double."""
    return raw.view(np.float64)
