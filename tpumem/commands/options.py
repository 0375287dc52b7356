"""Option values as people write them, parsed where tpumem/cli.py declares the
options (typer's `parser=`): sizes (12GiB, 800MB, bytes), capacities, TPU
topologies, shares or sizes (5%, 64MiB). What is not one is click's usage error,
one line that names the option (a topology: parse_topology's own line, which
names the forms it takes). Loaded at start-up, and by the pytest plugin: it
imports no analysis, and typer only to say what is wrong."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from tpumem.units import format_bytes

if TYPE_CHECKING:
    from tpumem.tpu.topology import Topology

DEFAULT_WIDTH = None  # columns of a text report: the terminal's (text_width)
FALLBACK_WIDTH = 80  # where no terminal says its own
MIN_WIDTH, MAX_WIDTH = 40, 1000  # what --width takes: narrower cannot hold the tables
# diff: changes of live bytes at the peak within this are noise, not listed as
# changes: runs of one program differ by what the allocator rounds and by which
# small buffer is live at the very moment of the peak (docs/figures.md, "tpumem diff").
DEFAULT_NOISE_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class Increase:
    """How much a peak may rise over the baseline's: a share of it, or bytes."""

    share: float | None = None
    bytes: int | None = None

    def allowed(self, baseline_bytes: int) -> float:
        return baseline_bytes * self.share if self.share is not None else float(self.bytes or 0)

    def __str__(self) -> str:
        return f"{self.share:.1%}" if self.share is not None else format_bytes(self.bytes)


NO_INCREASE = Increase(share=0.0)


def _bad(message: str) -> Exception:
    import typer

    return typer.BadParameter(message)


def size(text: str | int) -> int:
    """A size in bytes, 0 and up (an int: a default, already one)."""
    from tpumem.units import parse_bytes

    if isinstance(text, int):
        return text
    try:
        return parse_bytes(text)
    except ValueError as error:
        raise _bad(str(error)) from None


def capacity(text: str) -> int:
    """An allocator's size: above 0."""
    bytes_ = size(text)
    if bytes_ <= 0:
        raise _bad("give a size above 0")
    return bytes_


def topology(text: str) -> Topology:
    """A TPU topology (v5e:2x2, v4:2x2x1), checked before any work starts (what
    is not one: parse_topology's line, which names --tpu and the forms it takes)."""
    from tpumem.tpu.topology import parse_topology

    return parse_topology(text)


@dataclass(frozen=True, slots=True)
class Sweep:
    """`--sweep NAME=V1,V2,...`: the script's argument --NAME, and its values."""

    name: str
    values: tuple[str, ...]


_SWEEP = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]{0,63})=(.+)$")


def sweep(text: str) -> Sweep:
    """NAME=V1,V2,...: a script argument's name and the values to compile it at."""
    match = _SWEEP.match(text.strip())
    values = tuple(v.strip() for v in match.group(2).split(",")) if match else ()
    if match is None or not all(values):
        raise _bad(
            "give the script's argument and its values, as NAME=V1,V2,... "
            "(--sweep batch=8,16,32 compiles the script at --batch 8, 16 and 32)"
        )
    if len(values) > 64:
        raise _bad("at most 64 values: each is a compile of the whole script")
    if len(set(values)) < len(values):
        twice = next(v for v in values if values.count(v) > 1)
        raise _bad(f"{twice} given twice: each value is compiled once")
    return Sweep(match.group(1).lstrip("-"), values)


def share_or_size(text: str) -> Increase:
    """A share of a figure ("5%") or a size ("64MiB"), in ASCII digits."""
    from tpumem.units import parse_share

    if not text.strip().endswith("%"):
        return Increase(bytes=size(text))
    share = parse_share(text)
    if share is None:
        raise _bad(f"{text!r} is not a share such as 5% (ASCII digits)")
    return Increase(share=share)


def text_width(asked: int | None, stream: TextIO | None) -> int:
    """The columns a text report takes: those asked for, else the terminal's that
    `stream` writes to (None: a file, which has none), else $COLUMNS (as rich
    reads it), else FALLBACK_WIDTH; within what --width allows."""
    if asked is not None:
        return asked
    if stream is None:
        return FALLBACK_WIDTH
    columns: int | None = None
    try:
        if stream.isatty():
            # (0: a terminal that was given no size, as `script` or a container's
            # exec gives one: not known, so $COLUMNS or the fallback.)
            columns = os.get_terminal_size(stream.fileno()).columns or None
    except (OSError, ValueError, AttributeError):
        pass
    if columns is None:
        variable = os.environ.get("COLUMNS", "")
        number = int(variable) if variable.isdigit() and len(variable) < 6 else 0
        columns = number or FALLBACK_WIDTH  # (COLUMNS=0 says no more than none)
    return min(MAX_WIDTH, max(MIN_WIDTH, columns))
