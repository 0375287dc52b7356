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


def counted(count: int, word: str, words: str | None = None) -> str:
    """A count and its noun, the noun singular for one: `1 process`, `2 processes`
    (`words`: the plural, where it is not `word` and an s). Every count tpumem
    words goes through it."""
    return f"{count:,} {word if count == 1 else (words or word + 's')}"


def format_seconds(time_ns: int | None) -> str:
    return "-" if time_ns is None else f"{time_ns / 1e9:.3f} s"


# ASCII digits only (a full-width or Arabic-Indic digit is a digit to Python's
# int and float, and to nobody who reads the command line).
_NUMBER = r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+"
_SIZE = re.compile(rf"^\s*({_NUMBER})\s*([a-zA-Z]*)\s*$", re.ASCII)
_SHARE = re.compile(rf"^\s*({_NUMBER})\s*%\s*$", re.ASCII)
_LARGEST = (1 << 63) - 1
_TOO_LARGE = "larger than any memory (at most 2^63 - 1 bytes)"
# What parse_bytes takes: the units the reports print (format_bytes, B to PiB),
# and their powers of 1000, by their lower case.
_MULTIPLIERS = {
    "": 1,
    "b": 1,
    **{f"{prefix}{b}": 1000**power for power, prefix in enumerate("kmgtp", 1) for b in ("", "b")},
    **{unit.lower(): 1 << (10 * power) for power, unit in enumerate(_UNITS) if power},
}
ACCEPTED_UNITS = "B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB"


def parse_bytes(text: str) -> int:
    """`12GiB`, `800MB`, `1.5 GiB`, `1 PiB` or plain bytes: KB/MB/GB/TB/PB are
    powers of 1000, KiB/MiB/GiB/TiB/PiB powers of 1024 (ACCEPTED_UNITS), in ASCII
    digits. A fraction of a byte is refused, not rounded. ValueError for anything
    else, its message one line."""
    from fractions import Fraction

    found = _SIZE.match(text)
    if not found or found.group(2).lower() not in _MULTIPLIERS:
        raise ValueError(
            f"not a size: {text!r} (write e.g. 12GiB, 800MB or 1048576; units {ACCEPTED_UNITS})"
        )
    number, unit = found.group(1), found.group(2)
    if len(number) > 30:  # more digits than any size has: no int64 holds it
        raise ValueError(_TOO_LARGE)
    size = Fraction(number) * _MULTIPLIERS[unit.lower()]
    if size > _LARGEST:
        raise ValueError(_TOO_LARGE)
    if size.denominator != 1:
        written = f"{number} {unit or 'B'}"
        of = f" ({float(size):,.6g} bytes)" if unit.lower() not in ("", "b") else ""
        raise ValueError(f"{written}{of} is not a whole number of bytes")
    return int(size)


def parse_share(text: str) -> float | None:
    """`5%` as 0.05, in ASCII digits; None where `text` is not a share so written."""
    found = _SHARE.match(text)
    if found is None:
        return None
    share = float(found.group(1)) / 100
    return share if share < float("inf") else None
