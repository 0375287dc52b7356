"""TPU layouts: how many bytes XLA:TPU gives an array of a shape and dtype.

A TPU stores an array in tiles. What XLA:TPU does, read off libtpu's own
compiles for v4, v5e, v5p and v6e (tests/tools/record_tpu_layouts.py writes
the record this module is tested against):

- rank >= 2: two of the dimensions are tiled, the minor one to a multiple of
  128 lanes, the second-minor one to a multiple of 1, 2, 4 or 8 (the smallest
  power of two that holds it, at most 8; at least 2 rows for 16-bit types and 4
  for 8-bit ones, which pack that many rows into 32 bits). XLA picks
  which two dimensions are minor (the layout) and picks the one that pads
  least: a PyTorch conv kernel [Cout, Cin, 3, 3] is laid out with Cout and Cin
  minor, not 3x3. The row-major layout (the last two dimensions minor, as the
  shape is written) is the most it could take, kept as the upper bound.
- rank 0 and 1: one tile of 128 to 1024 elements (the smallest power of two
  that holds the array, at least 128 x 32 bits, at most 1024 elements).

A run recorded on a TPU already has its padding inside the sizes it recorded.

Shapes come from the trace, which any process may have written: a shape no
framework makes (more than MAX_RANK dimensions, more than MAX_ELEMENTS elements)
and a dtype of no width tpumem knows are not estimated, and the estimate says
how many bytes it left out for that. The best layout is found in time linear in
the rank, not by trying every pair of dimensions.
"""

from __future__ import annotations

import heapq
import math
import re
from dataclasses import dataclass
from fractions import Fraction

LANES = 128
MAX_SUBLANES = 8
MAX_VECTOR_TILE = 1024  # elements of a rank-1 array's largest tile
# A padding estimate above this share of the bytes it was made from is itself a
# sign to look at: many tiny buffers, or shapes with no good layout.
LARGE_SHARE = 0.5
_BITS_BY_NAME = {"bool": 8, "half": 16, "float": 32, "double": 64}
_DIGITS = re.compile(r"([0-9]+)")
# The widest element a framework has: complex128. A width of 0 (JAX's float0,
# which holds no bytes) or past this is no dtype a TPU lays out.
MAX_ELEMENT_BITS = 128
# The most dimensions an array has in any framework tpumem reads: TensorFlow's
# TensorShape holds at most 254 (numpy, so JAX, 64), and XLA gets its shapes from them.
MAX_RANK = 254
# No device holds more elements: 2^50 is 1 PiB at one byte each, the largest size
# a trace's rows may hold (trace/values.py). Past it a "shape" is not an array's.
MAX_ELEMENTS = 1 << 50
_MAX_DIGITS = len(str(MAX_ELEMENTS))


def element_bits(dtype: str | None) -> int | None:
    """Bits per element of a dtype name as frameworks write it (float32,
    bfloat16, float8_e4m3fn, int8, complex64, bool), None when unknown."""
    bits = named_bits(dtype)
    return bits if bits is not None and 0 < bits <= MAX_ELEMENT_BITS else None


def named_bits(dtype: str | None) -> int | None:
    """The width a dtype's name gives, whatever it is (float0: 0), read no further
    than one past the widest; None for a name that gives none (string)."""
    if not dtype:
        return None
    name = dtype.lower().removeprefix("torch.").removeprefix("dt_")
    if name in _BITS_BY_NAME:
        return _BITS_BY_NAME[name]
    found = _DIGITS.search(name)
    if not found:
        return None
    digits = found.group(1).lstrip("0") or "0"
    return int(digits) if len(digits) <= 3 else MAX_ELEMENT_BITS + 1


class _Beyond:
    """A shape written as one, but of no array (see MAX_RANK, MAX_ELEMENTS)."""


BEYOND = _Beyond()


def read_shape(shape: str | None) -> tuple[int, ...] | _Beyond | None:
    """`[16,64,512]` (or `(16, 64, 512)`) as integers; BEYOND for a shape past
    the bounds no array reaches; None when unknown ("?" or symbolic dimensions)."""
    if shape is None:
        return None
    inner = shape.strip().strip("[]()").replace(" ", "")
    if not inner:
        return ()
    parts = [part for part in inner.split(",") if part]
    if not all(part.isascii() and part.isdigit() for part in parts):
        return None
    if len(parts) > MAX_RANK or any(len(part) > _MAX_DIGITS for part in parts):
        return BEYOND
    dims = tuple(int(part) for part in parts)
    return dims if math.prod(dims) <= MAX_ELEMENTS else BEYOND


def parse_shape(shape: str | None) -> tuple[int, ...] | None:
    """The dimensions of a shape (read_shape), None unless they are an array's."""
    dims = read_shape(shape)
    return None if isinstance(dims, _Beyond) else dims


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _power_of_two_at_least(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


def _tiled(dims: tuple[int, ...], minor: int, second: int, bits: int, itemsize: int) -> int:
    """Bytes with dimension `minor` in lanes and `second` in sublanes. Narrow
    types pack 32 / bits rows into one 32-bit sublane: no fewer rows than that."""
    sublanes = _sublanes(dims[second], bits)
    rest = math.prod(d for i, d in enumerate(dims) if i not in (minor, second))
    return rest * _round_up(dims[second], sublanes) * _round_up(dims[minor], LANES) * itemsize


def _vector_bytes(elements: int, bits: int, itemsize: int) -> int:
    smallest = LANES * 32 // min(bits, 32)  # a tile is at least 128 32-bit words
    tile = min(MAX_VECTOR_TILE, max(smallest, _power_of_two_at_least(elements)))
    return _round_up(elements, tile) * itemsize


@dataclass(frozen=True, slots=True)
class TiledSize:
    """One array's bytes on a TPU."""

    best: int  # in the layout that pads least: what XLA:TPU picks
    row_major: int  # with the last two dimensions minor, as the shape is written
    plain: int  # unpadded


def _sublanes(dim: int, bits: int) -> int:
    packed = 32 // min(bits, 32)
    return min(MAX_SUBLANES, max(packed, _power_of_two_at_least(dim)))


def _best_pair(dims: tuple[int, ...], bits: int) -> tuple[int, int]:
    """(minor, second minor) of the layout that pads least. A layout's bytes are
    the plain bytes x what lanes add to its minor dimension (round_up(d, 128) / d)
    x what sublanes add to its second: the best pair joins the dimension that
    lanes pad least with the one sublanes pad least, or, where that is one
    dimension, the better of it with the runner-up of the other. Linear in the
    rank; every pair (as XLA could pick any) would be quadratic."""
    axes = range(len(dims))
    lanes = heapq.nsmallest(2, axes, key=lambda i: Fraction(_round_up(dims[i], LANES), dims[i]))
    rows = heapq.nsmallest(
        2, axes, key=lambda i: Fraction(_round_up(dims[i], _sublanes(dims[i], bits)), dims[i])
    )
    if lanes[0] != rows[0]:
        return lanes[0], rows[0]
    itemsize = max(1, bits // 8)
    return min(
        ((lanes[0], rows[1]), (lanes[1], rows[0])),
        key=lambda pair: _tiled(dims, pair[0], pair[1], bits, itemsize),
    )


def tiled_bytes(dims: tuple[int, ...], bits: int) -> TiledSize:
    itemsize = max(1, bits // 8)
    plain = math.prod(dims) * itemsize
    if plain == 0:
        return TiledSize(0, 0, 0)
    if len(dims) < 2:
        vector = _vector_bytes(math.prod(dims), bits, itemsize)
        return TiledSize(vector, vector, plain)
    last = len(dims) - 1
    best = _tiled(dims, *_best_pair(dims, bits), bits, itemsize)
    return TiledSize(best, _tiled(dims, last, last - 1, bits, itemsize), plain)
