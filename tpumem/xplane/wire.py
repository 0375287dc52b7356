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


def _read_varint_at(buf: np.ndarray, position: int) -> tuple[int, int]:
    value = shift = 0
    for index in range(position, min(position + 10, len(buf))):
        value |= (int(buf[index]) & 0x7F) << shift
        shift += 7
        if buf[index] < 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, index + 1
    raise WireError("a varint runs past the end of its buffer or is too long")


_HIGH_BITS = np.uint64(0x8080808080808080)
_LOW_BITS = np.uint64(0x7F7F7F7F7F7F7F7F)
# Packing 7-bit groups: pairs of bytes, then of 14-bit halves, then of 28-bit words.
_PACK_STEPS = tuple(
    (np.uint64(shift), np.uint64(keep), np.uint64(moved))
    for shift, keep, moved in (
        (1, 0x007F007F007F007F, 0x3F803F803F803F80),
        (2, 0x00003FFF00003FFF, 0x0FFFC0000FFFC000),
        (4, 0x000000000FFFFFFF, 0x00FFFFFFF0000000),
    )
)


def _compact(words: np.ndarray) -> np.ndarray:
    """Packs the low 7 bits of each of 8 little-endian bytes into 56 bits, in place
    (`words` holds only those bits)."""
    moved = np.empty_like(words)
    for shift, keep, high in _PACK_STEPS:
        np.right_shift(words, shift, out=moved)
        moved &= high
        words &= keep
        words |= moved
    return words


def words_at(buf: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The 8 bytes at each position as one little-endian word: a gather from a
    view of the buffer with a word at every byte (unaligned, no copy)."""
    every = np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))
    return every[start]


def read_varints(buf: np.ndarray, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Decodes one varint at each position; returns (values, positions after).
    One-byte varints (tags, small ids) take one gather; for longer ones the next
    8 bytes are loaded as one 64-bit word and decoded with bit operations."""
    try:
        first = buf[pos]  # positions are never negative: the gather checks the end
    except IndexError:
        raise WireError("a varint runs past the end of its buffer") from None
    values = (first & 0x7F).astype(np.uint64)
    after = pos + 1
    longer = np.flatnonzero(first >= 0x80)
    if not len(longer):
        return values, after
    start = after[longer]
    near_end = start > len(buf) - 9
    if near_end.any():
        for row in np.flatnonzero(near_end).tolist():
            # Rare: a varint in the buffer's last bytes, where a whole word does not fit.
            at = int(pos[longer[row]])
            values[longer[row]], after[longer[row]] = _read_varint_at(buf, at)
        longer, start = longer[~near_end], start[~near_end]
    rest, size, ended = _word_varints(words_at(buf, start))
    long = np.flatnonzero(~ended)
    if len(long):
        # 10-byte varints (negative int64): one more byte holds bit 63.
        tenth = buf[start[long] + 8]
        if (tenth >= 0x80).any():
            raise WireError("a varint is longer than 10 bytes")
        rest[long] |= (tenth & 1).astype(np.uint64) << np.uint64(56)
        size[long] = 9
    rest <<= np.uint64(7)
    values[longer] |= rest
    after[longer] = start + size
    return values, after


def _word_varints(words: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The varint at the start of each 8-byte little-endian word (`words`, used up):
    (values, sizes in bytes, whether it ended within the word; where it did not,
    the value holds the word's 8 groups of 7 bits and the size is 8)."""
    # The lowest clear high bit ends the varint; kept: the bytes up to it (all 8
    # where it lies further on, as (0 << 1) - 1 wraps to every bit).
    ends = ~words & _HIGH_BITS
    kept = ends & (~ends + np.uint64(1))
    kept <<= np.uint64(1)
    kept -= np.uint64(1)
    size = np.bitwise_count(kept).astype(np.int64) // 8
    words &= kept
    words &= _LOW_BITS
    return _compact(words), size, ends != 0


# Per varint size in bytes (a uint8; only 1-8 are read here): the bytes it spans,
# and the continuation bits they must hold (every byte's but the last's). Other
# sizes span nothing and expect a bit no masked high bits hold, so never match.
_SPANS = np.zeros(256, dtype=np.uint64)
_CONTINUED = np.ones(256, dtype=np.uint64)
for _size in range(1, 9):
    _SPANS[_size] = (1 << 8 * _size) - 1
    _CONTINUED[_size] = sum(0x80 << 8 * i for i in range(_size - 1))


def sized_varints(words: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at the start of each 8-byte little-endian word (used up) whose
    size in bytes is known from its field's length (`sizes`, uint8): (values,
    whether the bytes are a varint of that size). Sizes outside 1-8 are never
    valid here."""
    words &= _SPANS[sizes]
    valid = (words & _HIGH_BITS) == _CONTINUED[sizes]
    words &= _LOW_BITS
    return _compact(words), valid


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
        rows = np.flatnonzero(wire_type == VARINT)
        if len(rows):
            value[rows], after[rows] = read_varints(buf, after[rows])
        for kind, width in ((FIXED64, 8), (FIXED32, 4)):
            rows = np.flatnonzero(wire_type == kind)
            if len(rows):
                value[rows] = _read_fixed(buf, after[rows], width)
                after[rows] += width
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


def scan_leading(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, numbers: tuple[int, ...]
) -> tuple[dict[int, np.ndarray], np.ndarray]:
    """The leading varint fields `numbers` of each message, and where the rest of
    each message begins. Protobuf writes fields in number order, so an event's
    metadata id and offset come before its stats and the stats need not be read."""
    found = {number: np.zeros(len(starts), dtype=np.uint64) for number in numbers}
    pos = starts.astype(np.int64, copy=True)
    todo = np.flatnonzero(pos < ends)
    for _ in numbers:
        if not len(todo):
            break
        tag, after = read_varints(buf, pos[todo])
        number = (tag >> np.uint64(3)).astype(np.int64)
        leading = np.isin(number, numbers) & ((tag & np.uint64(7)) == VARINT)
        todo, after, number = todo[leading], after[leading], number[leading]
        value, after = read_varints(buf, after)
        if (after > ends[todo]).any():
            raise WireError("a field runs past the end of its message")
        for wanted in numbers:
            rows = number == wanted
            found[wanted][todo[rows]] = value[rows]
        pos[todo] = after
        todo = todo[after < ends[todo]]
    return found, pos


def scan_embedded(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, number: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The length-delimited fields `number` of each message (message, payload
    start, payload length), for messages made only of such fields, as an event's
    stats region is; messages holding anything else go through the generic scan."""
    tag = (number << 3) | LENGTH
    found: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    pos = starts.astype(np.int64, copy=True)
    todo = np.flatnonzero(pos < ends)
    other = np.zeros(len(starts), dtype=bool)
    while len(todo):
        try:
            is_tag = buf[pos[todo]] == tag
        except IndexError:
            raise WireError("a field runs past the end of its buffer") from None
        other[todo[~is_tag]] = True
        todo = todo[is_tag]
        size, payload = read_varints(buf, pos[todo] + 1)
        after = payload + size.astype(np.int64)
        if (after > ends[todo]).any():
            raise WireError("a field runs past the end of its message")
        found.append((todo, payload, size.astype(np.int64)))
        pos[todo] = after
        todo = todo[after < ends[todo]]
    odd = np.flatnonzero(other)
    if len(odd):
        # Drop what was found in those messages and read them field by field.
        found = [(m[~other[m]], s[~other[m]], n[~other[m]]) for m, s, n in found]
        fields = scan(buf, starts[odd], ends[odd])
        fields = fields.select((fields.number == number) & (fields.wire_type == LENGTH))
        found.append((odd[fields.message], fields.start, fields.length))
    if not found:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    message, start, length = (np.concatenate(column) for column in zip(*found, strict=True))
    return message, start, length


@dataclass(frozen=True, slots=True)
class Stats:
    """XStat messages decoded: each one's metadata id, value field number (2..7),
    raw value bits, and payload span for strings and bytes."""

    metadata_id: np.ndarray
    number: np.ndarray
    wire_type: np.ndarray
    value: np.ndarray
    start: np.ndarray
    length: np.ndarray


def scan_stats(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[Stats, np.ndarray]:
    """Decodes XStat messages; returns them and the message each came from.
    `metadata_id = 1` comes first, then one value field, the order in which
    protobuf writes them. Messages of another shape (a default id
    left out, unknown fields) go through the generic scan."""
    regular = (ends - starts >= 3) & (buf[np.minimum(starts, len(buf) - 1)] == 0x08)
    rows = np.flatnonzero(regular)
    metadata_id, at = read_varints(buf, starts[rows] + 1)
    tag, at = read_varints(buf, np.minimum(at, len(buf) - 1))
    number = (tag >> np.uint64(3)).astype(np.int64)
    wire_type = (tag & np.uint64(7)).astype(np.uint8)
    value = np.zeros(len(rows), dtype=np.uint64)
    start = np.zeros(len(rows), dtype=np.int64)
    length = np.zeros(len(rows), dtype=np.int64)
    is_varint = np.flatnonzero(wire_type == VARINT)
    value[is_varint], end_varint = read_varints(buf, at[is_varint])
    is_double = np.flatnonzero(wire_type == FIXED64)
    value[is_double] = _read_fixed(buf, at[is_double], 8)
    is_length = np.flatnonzero(wire_type == LENGTH)
    size, payload = read_varints(buf, at[is_length])
    start[is_length], length[is_length] = payload, size.astype(np.int64)
    end = np.empty(len(rows), dtype=np.int64)
    end[is_varint], end[is_double] = end_varint, at[is_double] + 8
    end[is_length] = payload + length[is_length]
    shaped = np.zeros(len(rows), dtype=bool)
    shaped[is_varint] = shaped[is_double] = shaped[is_length] = True
    misshaped = ~(shaped & (end == ends[rows]) & (number >= 2) & (number <= 7))
    result = [metadata_id.view(np.int64), number, wire_type, value, start, length]
    if misshaped.any():
        regular[rows[misshaped]] = False
        keep = ~misshaped
        result = [column[keep] for column in result]
        rows = rows[keep]
    odd = np.flatnonzero(~regular)
    if len(odd):
        fields = scan(buf, starts[odd], ends[odd])
        ids = np.zeros(len(odd), dtype=np.int64)
        is_id = fields.number == 1
        ids[fields.message[is_id]] = as_int64(fields.value[is_id])
        values = fields.select((fields.number >= 2) & (fields.number <= 7))
        extra = [
            ids[values.message],
            values.number,
            values.wire_type,
            values.value,
            values.start,
            values.length,
        ]
        owner = np.concatenate([rows, odd[values.message]])
        order = np.argsort(owner, kind="stable")
        result = [np.concatenate([a, b])[order] for a, b in zip(result, extra, strict=True)]
        return Stats(*result), owner[order]
    return Stats(*result), rows


def as_int64(raw: np.ndarray) -> np.ndarray:
    """Varint bits read as a two's-complement int64 (protobuf int64 fields)."""
    return raw.view(np.int64)


def as_double(raw: np.ndarray) -> np.ndarray:
    """Fixed64 bits read as a double."""
    return raw.view(np.float64)
