"""A figure's value in words, by its unit (analysis/figures.py): one rule for the
comparison's cells, the diff's rows and a run's spread."""

from __future__ import annotations

from tpumem.analysis.figures import BYTES, COUNT, RATE, SHARE, TIME
from tpumem.units import format_bytes, format_seconds


def format_value(unit: str, value: object) -> str:
    if value is None:
        return "-"
    if unit == BYTES:
        return format_bytes(value)  # type: ignore[arg-type]
    if unit == COUNT:
        return f"{value:,}"
    if unit == RATE:
        return f"{value:,.0f} /s"
    if unit == SHARE:
        return f"{value:.3f}"
    if unit == TIME:
        return format_seconds(value)  # type: ignore[arg-type]
    return str(value)


def format_signed(unit: str, change: float) -> str:
    """A change of a figure, with its sign."""
    if unit == SHARE:
        return f"{change:+.3f}"
    sign = "+" if change > 0 else "-" if change < 0 else "±"
    return sign + format_value(unit, abs(change))


def format_change(unit: str, before: float | None, after: float | None) -> str:
    """AFTER - BEFORE, signed, and for bytes its share of BEFORE too."""
    if before is None or after is None:
        return "-"
    change = after - before
    said = format_signed(unit, change)
    if unit == BYTES and before:
        said += f" ({change / before:+.1%})"
    return said
