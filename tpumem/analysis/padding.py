"""TPU layout padding, estimated from shapes alone.

A TPU stores an array of rank >= 2 in tiles over its two minor dimensions: 8x128
for 32-bit types, 16x128 for 16-bit and 32x128 for 8-bit (DESIGN.md, "The
figures"). A [1000, 1000] float32 array occupies [1000, 1024]. The estimate says
how many more bytes the buffers live at a run's peak would take on a TPU; a run
recorded on a TPU already has its padding inside the sizes it recorded.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tpumem.analysis import labels
from tpumem.analysis.peak import LiveGroup

LANES = 128
_SUBLANES = {8: 32, 16: 16}  # by element bits; 32 and more take 8
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


def tiled_bytes(dims: tuple[int, ...], bits: int) -> tuple[int, int]:
    """(bytes as laid out on a TPU, bytes unpadded) of one array."""
    itemsize = max(1, bits // 8)
    plain = math.prod(dims) * itemsize
    if len(dims) < 2:
        return plain, plain
    sublanes = _SUBLANES.get(bits, 8)
    rows = -(-dims[-2] // sublanes) * sublanes
    columns = -(-dims[-1] // LANES) * LANES
    return math.prod(dims[:-2]) * rows * columns * itemsize, plain


@dataclass(frozen=True, slots=True)
class LayoutPadding:
    label: str
    extra_bytes: int | None  # what the live buffers at the peak would add on a TPU
    counted_bytes: int  # bytes of the live buffers whose shape and dtype were known
    uncounted_bytes: int  # live bytes without a usable shape or dtype
    included: bool  # a TPU run: its recorded sizes already hold the padding


def layout_padding(groups: tuple[LiveGroup, ...], backend: str) -> LayoutPadding:
    extra = counted = uncounted = 0
    for group in groups:
        dims, bits = parse_shape(group.shape), element_bits(group.dtype)
        if dims is None or bits is None:
            uncounted += group.bytes
            continue
        padded, plain = tiled_bytes(dims, bits)
        extra += (padded - plain) * group.count
        counted += group.bytes
    if not counted:
        return LayoutPadding(labels.NOT_AVAILABLE, None, 0, uncounted, False)
    if backend.lower() == "tpu":
        return LayoutPadding(labels.MEASURED, 0, counted, uncounted, True)
    return LayoutPadding(labels.ESTIMATED, extra, counted, uncounted, False)
