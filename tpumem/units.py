"""Byte sizes and times as people read them."""

from __future__ import annotations

import re

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(count: int | float | None, digits: int = 1) -> str:
    """Bytes in binary units; `digits` after the point (a verdict near its
    limit needs two: 15.75 GiB, as XLA:TPU says its own)."""
    if count is None:
        return "-"
    value = float(count)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return (
                f"{sign}{int(value)} {unit}" if unit == "B" else f"{sign}{value:.{digits}f} {unit}"
            )
        value /= 1024
    raise AssertionError("unreachable")


def format_seconds(time_ns: int | None) -> str:
    return "-" if time_ns is None else f"{time_ns / 1e9:.3f} s"


_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-zA-Z]*)\s*$", re.ASCII)
_LARGEST = (1 << 63) - 1
_MULTIPLIERS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
}


def parse_bytes(text: str) -> int:
    """`12GiB`, `800MB`, `1.5 GiB` or plain bytes: KB/MB/GB are powers of 1000,
    KiB/MiB/GiB powers of 1024. ValueError for anything else."""
    found = _SIZE.match(text)
    if not found or found.group(2).lower() not in _MULTIPLIERS:
        raise ValueError(f"not a size: {text!r} (write e.g. 12GiB, 800MB or 1048576)")
    number, unit = found.group(1), _MULTIPLIERS[found.group(2).lower()]
    if len(number) > 30:  # more digits than any size has: no float or int64 holds it
        raise ValueError("larger than any memory (at most 2^63 - 1 bytes)")
    size = round(float(number) * unit) if "." in number else int(number) * unit
    if size > _LARGEST:
        raise ValueError("larger than any memory (at most 2^63 - 1 bytes)")
    return size
