"""XLA:TPU's refusal of a program that does not fit in a chip's HBM, read from its
message: what the program needs, what XLA:TPU allows, and by how much it is over,
as XLA:TPU says them (rounded: "21.56G" is 21.56 GiB to a hundredth).

The forms libtpu releases print:
    RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for
    HLO temporaries (21.56G) exceeds available HBM (15.75G).
    RESOURCE_EXHAUSTED: ... Ran out of memory in memory space hbm. Used 21.56G of
    15.75G hbm. Exceeded hbm capacity by 5.81G.
the second followed by the largest allocations, with shapes and source lines.
A kernel whose blocks do not fit the chip's on-chip VMEM (a Pallas kernel's
windows) is refused in that memory space instead:
    RESOURCE_EXHAUSTED: Allocation (size=268435456) would exceed memory
    (size=134217728) :: #allocation2 [shape = 'u8[268435456]{0}', space=vmem, ...
    RESOURCE_EXHAUSTED: ... Ran out of memory in memory space vmem. Used 256.00M
    of 128.00M vmem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SIZE = r"([0-9]+(?:\.[0-9]+)?)([KMGT]?)(?:i?B)?"
_REQUIRED = re.compile(rf"required for [^(]*\({_SIZE}\)", re.IGNORECASE)
_AVAILABLE = re.compile(rf"available HBM \({_SIZE}\)", re.IGNORECASE)
_USED = re.compile(rf"Used {_SIZE} of {_SIZE} hbm", re.IGNORECASE)
_OVER = re.compile(rf"capacity by {_SIZE}", re.IGNORECASE)
_VMEM_USED = re.compile(rf"Used {_SIZE} of {_SIZE} vmem", re.IGNORECASE)
_WOULD_EXCEED = re.compile(r"Allocation \(size=([0-9]+)\) would exceed memory \(size=([0-9]+)\)")
HBM, VMEM = "hbm", "vmem"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
MARK = "RESOURCE_EXHAUSTED"
# Where the second form lists the largest allocations (then a compile on a larger
# chip, to show what fills the program, adds nothing).
LISTED = "Largest program allocations"


@dataclass(frozen=True, slots=True)
class Figure:
    bytes: int  # as XLA:TPU rounds it
    rounding_bytes: int  # half its rounding: "15.75G" is 15.75 GiB +- this


@dataclass(frozen=True, slots=True)
class Refusal:
    needed: Figure | None
    available: Figure | None
    over: Figure | None  # XLA:TPU's own where it says it, else needed - available
    space: str = HBM  # the memory it did not fit: HBM, or a kernel's on-chip VMEM


def _figure(number: str, unit: str) -> Figure:
    scale = _UNITS[unit.upper()]
    decimals = len(number.partition(".")[2])
    return Figure(round(float(number) * scale), round(scale * 10**-decimals / 2))


def refusal(message: str) -> Refusal | None:
    """The refusal a compile error's message holds; None for another error."""
    if MARK not in message:
        return None
    if "space=vmem" in message or "memory space vmem" in message.lower():
        return _vmem(message)
    if "hbm" not in message.lower():
        return None
    needed: Figure | None
    available: Figure | None
    used = _USED.search(message)
    if used is not None:
        needed, available = _figure(*used.group(1, 2)), _figure(*used.group(3, 4))
    else:
        found = [p.search(message) for p in (_REQUIRED, _AVAILABLE)]
        needed, available = (None if f is None else _figure(*f.group(1, 2)) for f in found)
    by = _OVER.search(message)
    over = _figure(*by.group(1, 2)) if by is not None else None
    if over is None and needed is not None and available is not None:
        over = Figure(
            needed.bytes - available.bytes, needed.rounding_bytes + available.rounding_bytes
        )
    return Refusal(needed, available, over)


def _vmem(message: str) -> Refusal:
    """A kernel's blocks too large for on-chip VMEM: what they need against it."""
    used = _VMEM_USED.search(message)
    if used is not None:
        needed, available = _figure(*used.group(1, 2)), _figure(*used.group(3, 4))
    else:
        exact = _WOULD_EXCEED.search(message)
        if exact is None:
            return Refusal(None, None, None, VMEM)
        needed, available = (Figure(int(exact.group(i)), 0) for i in (1, 2))
    over = Figure(needed.bytes - available.bytes, needed.rounding_bytes + available.rounding_bytes)
    return Refusal(needed, available, over, VMEM)
