"""The stats of many events in their usual shape, decoded a stat position at a
time (one stat of every event a pass: arrays small enough for the CPU's caches).

A memory event's stats are XStat messages written the same way every time: tag
0x22, a one-byte length, tag 0x08, a one-byte metadata id, then one value field.
Read so, the walk from one stat to the next needs only the header's 8-byte word
(its length byte says where the next one begins), and a value's size follows from
the stat's length, so a varint is decoded with a mask instead of a search for its
last byte. Each value lands straight in its stat's row of a table (stat code x
event). An event with any stat of another shape (long ids, long strings, unknown
fields) is left to the general decoder (wire.py), which reads any valid encoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.xplane.wire import read_varints, sized_varints, words_at

STATS_TAG = 0x22  # XEvent.stats (field 4, length-delimited)
ID_TAG = 0x08  # XStat.metadata_id (field 1, varint)
DOUBLE, UINT64, INT64, STRING, REF = 0x11, 0x18, 0x20, 0x2A, 0x38  # XStat's value tags
_BYTE = np.uint64(0xFF)


@dataclass(frozen=True, slots=True)
class RegularStats:
    """Per stat code (row) and event (column): the value tag found (0: none), the
    raw value bits (a string's payload start), a string's length. `irregular`:
    events not decoded here (their columns hold nothing)."""

    tag: np.ndarray
    value: np.ndarray
    length: np.ndarray
    irregular: np.ndarray


# What each value tag holds, looked up by the tag byte: 0 is not a value tag.
_VARINT_KIND, _DOUBLE_KIND, _STRING_KIND = 1, 2, 3
_KIND = np.zeros(256, dtype=np.uint8)
_KIND[[UINT64, INT64, REF]] = _VARINT_KIND
_KIND[DOUBLE] = _DOUBLE_KIND
_KIND[STRING] = _STRING_KIND
# A stat header's bytes in one little-endian word: tag 0x22, a length below 0x80,
# tag 0x08, an id below 0x80 (the high bits must be clear).
_HEADER_MASK = np.uint64(0x80FF80FF)
_HEADER = np.uint64(ID_TAG << 16 | STATS_TAG)


def decode_regular(
    buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, id_codes: np.ndarray, codes: int
) -> RegularStats:
    """The stats in buf[starts[i]:ends[i]] of each event (only stats there), by the
    code `id_codes` gives each stat metadata id (codes: how many there are)."""
    count = len(starts)
    tables = RegularStats(
        np.zeros((codes, count), dtype=np.uint8),
        np.zeros((codes, count), dtype=np.uint64),
        np.zeros((codes, count), dtype=np.int64),
        np.zeros(count, dtype=bool),
    )
    code_of = np.zeros(0x80, dtype=np.intp)  # (ids past 0x7F fail the header's mask)
    code_of[: min(0x80, len(id_codes))] = id_codes[:0x80]
    last_word = len(buf) - 8  # a word's 8-byte gather must fit in the buffer
    irregular = tables.irregular
    # One stat of every event not done yet a pass (a batch small enough for the
    # CPU's caches): its header checked, its value decoded, the next one found.
    todo = np.flatnonzero(starts < ends)
    at, end = starts[todo].astype(np.int64), ends[todo]
    while len(todo):
        fits = at <= last_word
        if not fits.all():
            irregular[todo[~fits]] = True
            todo, at, end = todo[fits], at[fits], end[fits]
            if not len(todo):
                break
        word = words_at(buf, at)
        usual = (word & _HEADER_MASK) == _HEADER
        if not usual.all():
            irregular[todo[~usual]] = True
            todo, at, end, word = todo[usual], at[usual], end[usual], word[usual]
            if not len(todo):
                break
        size = ((word >> np.uint64(8)) & _BYTE).astype(np.int64)
        at += 2 + size  # where this stat ends and the next begins
        valid = _decode_values(
            buf,
            word,
            size,
            at,
            end,
            tables,
            code_of[(word >> np.uint64(24)) & _BYTE] * count + todo,
        )
        irregular[todo[~valid]] = True
        more = valid & (at < end)
        if not more.all():
            todo, at, end = todo[more], at[more], end[more]
    tables.tag[:, irregular] = 0
    return tables


def _decode_values(
    buf: np.ndarray,
    word: np.ndarray,
    size: np.ndarray,
    stat_end: np.ndarray,
    event_end: np.ndarray,
    tables: RegularStats,
    cell: np.ndarray,
) -> np.ndarray:
    """Decodes the value of one stat of each event (its header's `word`) into its
    `cell` (code, event) of the tables; returns which stats were of the usual shape."""
    payload = stat_end - size + 3
    last_word = len(buf) - 8
    fits = (stat_end <= event_end) & (payload <= last_word)
    tag = ((word >> np.uint64(32)) & _BYTE).astype(np.uint8)
    kind = _KIND[tag]
    raw = words_at(buf, np.minimum(payload, last_word))
    doubles = np.flatnonzero(kind == _DOUBLE_KIND)
    double_bits = raw[doubles]
    # A varint's size is the stat's less its 3 bytes of tags and id (wrapping
    # below 3, to a size never valid).
    value, valid = sized_varints(raw, size.astype(np.uint8) - np.uint8(3))
    valid &= kind == _VARINT_KIND
    # Longer ones (negative int64s take ten bytes) are read in general.
    long = np.flatnonzero((kind == _VARINT_KIND) & fits & (size > 11))
    if len(long):
        value[long], after = read_varints(buf, payload[long])
        valid[long] = after == stat_end[long]
    value[doubles] = double_bits
    valid[doubles] = size[doubles] == 11
    strings = np.flatnonzero((kind == _STRING_KIND) & fits & (size > 3))
    if len(strings):
        string_length, string_start = read_varints(buf, payload[strings])
        string_length = string_length.astype(np.int64)
        value[strings] = string_start.astype(np.uint64)
        valid[strings] = string_start + string_length == stat_end[strings]
        tables.length.ravel()[cell[strings]] = string_length
    valid &= fits
    tables.tag.ravel()[cell] = tag
    tables.value.ravel()[cell] = value
    return valid
