"""TPU layout padding at a run's peak: the live buffers' shapes laid out as
XLA:TPU lays them (hlo/tiles.py's rule), against their bytes, the shapes that
pad most first. A run recorded on a TPU already has its padding inside the
sizes it recorded; a shape or dtype tiles.py does not estimate is counted as
left out, with its bytes."""

from __future__ import annotations

from dataclasses import dataclass

from tpumem.analysis import provenance
from tpumem.analysis.peak import LiveGroup
from tpumem.hlo.tiles import (
    BEYOND,
    LARGE_SHARE,
    element_bits,
    named_bits,
    read_shape,
    tiled_bytes,
)


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
    # Of the uncounted bytes, those whose shape no array has (past MAX_RANK or
    # MAX_ELEMENTS) or whose dtype has no width a TPU lays out: not estimated.
    beyond_bytes: int = 0

    @property
    def large(self) -> bool:
        """Whether the estimate is out of proportion to the bytes it counts."""
        return bool(self.extra_bytes and self.extra_bytes > LARGE_SHARE * self.counted_bytes)


def layout_padding(groups: tuple[LiveGroup, ...], backend: str, top: int = 3) -> LayoutPadding:
    extra = row_major = counted = uncounted = beyond = 0
    by_shape: dict[tuple[str, str], list[int]] = {}
    for group in groups:
        dims, bits = read_shape(group.shape), element_bits(group.dtype)
        if dims is BEYOND or (bits is None and named_bits(group.dtype) is not None):
            beyond += group.bytes
        if not isinstance(dims, tuple) or bits is None:  # (None, or BEYOND)
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
        return LayoutPadding(
            provenance.NOT_AVAILABLE, None, None, 0, uncounted, False, beyond_bytes=beyond
        )
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
        beyond,
    )
