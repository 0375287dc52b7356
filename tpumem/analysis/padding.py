"""TPU layout padding, estimated from shapes as XLA:TPU lays arrays out.

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
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from tpumem.analysis import provenance
from tpumem.analysis.peak import LiveGroup

LANES = 128
MAX_SUBLANES = 8
MAX_VECTOR_TILE = 1024  # elements of a rank-1 array's largest tile
# A padding estimate above this share of the bytes it was made from is itself a
# sign to look at: many tiny buffers, or shapes with no good layout.
LARGE_SHARE = 0.5
_BITS_BY_NAME = {"bool": 8, "half": 16, "float": 32, "double": 64}
_DIGITS = re.compile(r"(\d+)")


def element_bits(dtype: str | None) -> int | None:
    """Bits per element of a dtype name as frameworks write it (float32,
    bfloat16, float8_e4m3fn, int8, complex64, bool), None when unknown."""
    if not dtype:
        return None
    name = dtype.lower().removeprefix("torch.").removeprefix("dt_")
    if name in _BITS_BY_NAME:
        return _BITS_BY_NAME[name]
    found = _DIGITS.search(name)
    return int(found.group(1)) if found else None


def parse_shape(shape: str | None) -> tuple[int, ...] | None:
    """`[16,64,512]` (or `(16, 64, 512)`) as integers; None when unknown."""
    if shape is None:
        return None
    inner = shape.strip().strip("[]()").replace(" ", "")
    if not inner:
        return ()
    try:
        dims = tuple(int(part) for part in inner.split(",") if part)
    except ValueError:
        return None  # "?" or symbolic dimensions
    return dims if all(d >= 0 for d in dims) else None


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _power_of_two_at_least(value: int) -> int:
    return 1 << max(0, value - 1).bit_length()


def _tiled(dims: tuple[int, ...], minor: int, second: int, bits: int, itemsize: int) -> int:
    """Bytes with dimension `minor` in lanes and `second` in sublanes. Narrow
    types pack 32 / bits rows into one 32-bit sublane: no fewer rows than that."""
    packed = 32 // min(bits, 32)
    sublanes = min(MAX_SUBLANES, max(packed, _power_of_two_at_least(dims[second])))
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


def tiled_bytes(dims: tuple[int, ...], bits: int) -> TiledSize:
    itemsize = max(1, bits // 8)
    plain = math.prod(dims) * itemsize
    if plain == 0:
        return TiledSize(0, 0, 0)
    if len(dims) < 2:
        vector = _vector_bytes(math.prod(dims), bits, itemsize)
        return TiledSize(vector, vector, plain)
    last = len(dims) - 1
    best = min(
        _tiled(dims, minor, second, bits, itemsize)
        for minor, second in itertools.permutations(range(len(dims)), 2)
    )
    return TiledSize(best, _tiled(dims, last, last - 1, bits, itemsize), plain)


@dataclass(frozen=True, slots=True)
class PaddedShape:
    """Live buffers of one shape and dtype, and what a TPU adds to them."""

    shape: str
    dtype: str
    count: int
    bytes: int
    extra_bytes: int


@dataclass(frozen=True, slots=True)
class LayoutPadding:
    label: str
    extra_bytes: int | None  # what the live buffers at the peak would add on a TPU
    # The same if every buffer kept the row-major layout: the most XLA could add.
    row_major_extra_bytes: int | None
    counted_bytes: int  # bytes of the live buffers whose shape and dtype were known
    uncounted_bytes: int  # live bytes without a usable shape or dtype
    included: bool  # a TPU run: its recorded sizes already hold the padding
    largest: tuple[PaddedShape, ...] = ()  # the shapes that add the most, largest first

    @property
    def large(self) -> bool:
        """Whether the estimate is out of proportion to the bytes it counts."""
        return bool(self.extra_bytes and self.extra_bytes > LARGE_SHARE * self.counted_bytes)


def layout_padding(groups: tuple[LiveGroup, ...], backend: str, top: int = 3) -> LayoutPadding:
    extra = row_major = counted = uncounted = 0
    by_shape: dict[tuple[str, str], list[int]] = {}
    for group in groups:
        dims, bits = parse_shape(group.shape), element_bits(group.dtype)
        if dims is None or bits is None:
            uncounted += group.bytes
            continue
        size = tiled_bytes(dims, bits)
        added = (size.best - size.plain) * group.count
        extra += added
        row_major += (size.row_major - size.plain) * group.count
        counted += group.bytes
        totals = by_shape.setdefault((str(group.shape), str(group.dtype)), [0, 0, 0])
        totals[0] += group.count
        totals[1] += group.bytes
        totals[2] += added
    if not counted:
        return LayoutPadding(provenance.NOT_AVAILABLE, None, None, 0, uncounted, False)
    if backend.lower() == "tpu":
        return LayoutPadding(provenance.MEASURED, 0, 0, counted, uncounted, True)
    largest = sorted(
        (PaddedShape(shape, dtype, *totals) for (shape, dtype), totals in by_shape.items()),
        key=lambda s: -s.extra_bytes,
    )
    return LayoutPadding(
        provenance.ESTIMATED,
        extra,
        row_major,
        counted,
        uncounted,
        False,
        tuple(s for s in largest[:top] if s.extra_bytes > 0),
    )
