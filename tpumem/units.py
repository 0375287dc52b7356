"""Byte sizes and times as people read them."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(count: int | float | None) -> str:
    if count is None:
        return "-"
    value = float(count)
    sign = "-" if value < 0 else ""
    value = abs(value)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{sign}{int(value)} {unit}" if unit == "B" else f"{sign}{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_seconds(time_ns: int | None) -> str:
    return "-" if time_ns is None else f"{time_ns / 1e9:.3f} s"
