"""The C kernels of event_kernels.c, where the install could build them.

They are an optional extension (pyproject.toml): without a C compiler tpumem
installs all the same and reads with its numpy decoder, which gives the same
columns (tests/unit/test_xplane_wire.py holds the two to that) at a few times the
CPU. The library is plain C, loaded with ctypes: no Python headers needed to
build it, and ctypes lets go of the GIL for each call.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache

import numpy as np

from tpumem import c_library

MODULE = "tpumem.xplane._event_kernels"
# Set (to anything) to read with the numpy decoder although the kernels are built.
NUMPY_ONLY_VARIABLE = "TPUMEM_NUMPY_DECODER"

_POINTER, _SIZE = ctypes.c_void_p, ctypes.c_int64


@cache
def _library() -> ctypes.CDLL | None:
    return c_library.load(MODULE, NUMPY_ONLY_VARIABLE, _declare)


def _declare(library: ctypes.CDLL) -> None:
    library.tpumem_line_events.restype = _SIZE
    library.tpumem_line_events.argtypes = [_POINTER, _SIZE, _SIZE, *[_POINTER] * 3, _SIZE]
    library.tpumem_decode_events.restype = None
    library.tpumem_decode_events.argtypes = [
        *[_POINTER] * 3,
        _SIZE,
        _POINTER,
        _SIZE,
        _POINTER,
        _SIZE,
        _SIZE,
        _POINTER,
        _POINTER,
    ]
    library.tpumem_find_stat_headers.restype = _SIZE
    # (buf, first, end; out, cap)
    span: list[type[ctypes.c_void_p | ctypes.c_int64]] = [_POINTER, _SIZE, _SIZE]
    found: list[type[ctypes.c_void_p | ctypes.c_int64]] = [_POINTER, _SIZE]
    library.tpumem_find_stat_headers.argtypes = [*span, _POINTER, _SIZE, *found]
    library.tpumem_pair_buffers.restype = None
    library.tpumem_pair_buffers.argtypes = [*[_POINTER] * 3, _SIZE, _POINTER, _SIZE, _POINTER]


def available() -> bool:
    return _library() is not None


def _address(array: np.ndarray) -> int:
    assert array.flags.c_contiguous
    return array.ctypes.data


@dataclass(frozen=True, slots=True)
class LineEvents:
    """A line's events: payload starts and ends, and metadata ids (0 where none)."""

    starts: np.ndarray
    ends: np.ndarray
    ids: np.ndarray


def line_events(buf: np.ndarray, first: int, end: int, most: int) -> LineEvents | None:
    """The events written one after the other from the tag at `first` up to
    another field or `end`; None where one runs past `end`, or where there are
    more than `most`."""
    library = _library()
    assert library is not None
    if not 0 <= first <= end <= len(buf):
        return None
    cap = min(most, (end - first) // 2) + 1  # (an event takes at least two bytes)
    starts, ends = np.empty(cap, np.int64), np.empty(cap, np.int64)
    ids = np.empty(cap, np.uint64)
    count = library.tpumem_line_events(
        _address(buf), first, end, _address(starts), _address(ends), _address(ids), cap
    )
    if count < 0 or count > most:
        return None
    return LineEvents(starts[:count].copy(), ends[:count].copy(), ids[:count].copy())


def find_stat_headers(buf: np.ndarray, first: int, end: int, pattern: bytes) -> np.ndarray:
    """Where `pattern` (a stat header: its second byte, the length, may be
    anything) begins in buf[first:end], as positions in `buf`."""
    library = _library()
    assert library is not None and 0 <= first <= end <= len(buf)
    cap = 64
    while True:
        found = np.empty(cap, np.int64)
        count = library.tpumem_find_stat_headers(
            _address(buf), first, end, pattern, len(pattern), _address(found), cap
        )
        if count <= cap:
            return found[:count]
        cap = count


def pair_buffers(codes: np.ndarray, address: np.ndarray, is_alloc: np.ndarray) -> np.ndarray:
    """trace_columns.pair_buffers in one pass: `codes` int64 (negative: no
    allocator), `address` int64, `is_alloc` bool, rows in time order."""
    library = _library()
    assert library is not None
    codes = np.ascontiguousarray(codes, np.int64)
    address = np.ascontiguousarray(address, np.int64)
    is_alloc = np.ascontiguousarray(is_alloc, np.bool_)
    count = len(address)
    assert len(codes) == len(is_alloc) == count
    slots = 1 << max(4, (2 * count).bit_length())  # (at most half full)
    table = np.full(slots, -1, np.int64)
    ids = np.empty(count, np.int64)
    library.tpumem_pair_buffers(
        _address(codes),
        _address(address),
        _address(is_alloc),
        count,
        _address(table),
        slots,
        _address(ids),
    )
    return ids


class Column(ctypes.Structure):
    """Where the kernel writes one stat's values (event_kernels.c's column_t)."""

    _fields_ = [
        ("kind", ctypes.c_int64),
        ("values", _POINTER),
        ("present", _POINTER),
        ("ref", _POINTER),
        ("start", _POINTER),
        ("length", _POINTER),
    ]


_INTEGERS, _DOUBLES, _STRINGS = 1, 2, 3


def numeric_column(values: np.ndarray, present: np.ndarray) -> Column:
    """A stat read as numbers: int64 or float64 `values`, bool `present`."""
    kind = _DOUBLES if values.dtype == np.float64 else _INTEGERS
    assert values.dtype in (np.float64, np.int64) and present.dtype == np.bool_
    return Column(kind, _address(values), _address(present), None, None, None)


def string_column(ref: np.ndarray, start: np.ndarray, length: np.ndarray) -> Column:
    """A stat read as strings: int64 reference (-1: none), start and length (-1:
    none) of inline bytes."""
    assert ref.dtype == start.dtype == length.dtype == np.int64
    return Column(_STRINGS, None, None, _address(ref), _address(start), _address(length))


def decode_events(
    buf: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    id_codes: np.ndarray,
    columns: ctypes.Array[Column],
    first_row: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Decodes events: each one's stats whose metadata id has a code in
    `id_codes` into row `first_row + i` of columns[code] (code 0: none). Returns
    each event's offset_ps and which events it left alone (another shape: their
    rows hold nothing, for the numpy decoder)."""
    library = _library()
    assert library is not None
    count = len(starts)
    starts = np.ascontiguousarray(starts, dtype=np.int64)
    ends = np.ascontiguousarray(ends, dtype=np.int64)
    id_codes = np.ascontiguousarray(id_codes, dtype=np.int8)
    offset = np.empty(count, np.int64)
    irregular = np.empty(count, dtype=bool)
    library.tpumem_decode_events(
        _address(buf),
        _address(starts),
        _address(ends),
        count,
        _address(id_codes),
        len(id_codes),
        columns,
        len(columns),
        first_row,
        _address(offset),
        _address(irregular),
    )
    return offset, irregular
