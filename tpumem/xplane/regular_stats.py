"""The stats of many events in their usual shape, decoded a stat position at a time.

A memory event's stats are XStat messages written the same way every time: tag
0x22, a one-byte length, tag 0x08, a one-byte metadata id, then one value field.
Read so, a stat costs one 8-byte gather for its header and one for its value, and
each lands straight in its stat's row of a table (stat code x event). An event
with any stat of another shape (long ids, unknown fields) is left to the general
decoder (wire.py), which reads any valid encoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.xplane.wire import read_varints, read_wide_varints, words_at

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
    tag = np.zeros((codes, count), dtype=np.uint8)
    value = np.zeros((codes, count), dtype=np.uint64)
    length = np.zeros((codes, count), dtype=np.int64)
    irregular = np.zeros(count, dtype=bool)
    code_of = np.zeros(0x80, dtype=np.intp)  # one-byte ids; others are irregular
    code_of[: min(0x80, len(id_codes))] = id_codes[:0x80]
    pos = starts.astype(np.int64, copy=True)
    todo = np.flatnonzero(pos < ends)
    last_word = len(buf) - 8  # a header's 8-byte gather must fit in the buffer
    while len(todo):
        at = pos[todo]
        if at.max() > last_word:
            fits = at <= last_word
            irregular[todo[~fits]] = True
            todo, at = todo[fits], at[fits]
        word = words_at(buf, at)
        size = ((word >> np.uint64(8)) & _BYTE).astype(np.int64)
        stat_id = ((word >> np.uint64(24)) & _BYTE).astype(np.intp)
        kind = _KIND[(word >> np.uint64(32)) & _BYTE]
        stat_end = at + 2 + size
        regular = ((word & _HEADER_MASK) == _HEADER) & (size >= 3) & (kind != 0)
        regular &= stat_end <= ends[todo]
        found = np.zeros(len(todo), dtype=np.uint64)
        spans = np.zeros(len(todo), dtype=np.int64)
        payload = at + 5
        varints = np.flatnonzero(regular & (kind == _VARINT_KIND))
        found[varints], after = read_wide_varints(buf, payload[varints])
        regular[varints] &= after == stat_end[varints]
        doubles = kind == _DOUBLE_KIND
        regular &= ~doubles | (payload + 8 == stat_end)
        doubles = np.flatnonzero(regular & doubles)
        found[doubles] = words_at(buf, payload[doubles])
        strings = np.flatnonzero(regular & (kind == _STRING_KIND))
        string_length, string_start = read_varints(buf, payload[strings])
        found[strings] = string_start.astype(np.uint64)
        spans[strings] = string_length.astype(np.int64)
        regular[strings] &= string_start + spans[strings] == stat_end[strings]
        irregular[todo[~regular]] = True
        keep = np.flatnonzero(regular)
        events = todo[keep]
        cell = code_of[stat_id[keep]] * count + events  # (code, event) in the flat tables
        tag.ravel()[cell] = ((word[keep] >> np.uint64(32)) & _BYTE).astype(np.uint8)
        value.ravel()[cell] = found[keep]
        length.ravel()[cell[spans[keep] > 0]] = spans[keep][spans[keep] > 0]
        pos[events] = stat_end[keep]
        todo = events[stat_end[keep] < ends[events]]
    tag[:, irregular] = 0
    return RegularStats(tag, value, length, irregular)
