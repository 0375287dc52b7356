"""An out-of-memory failure in words, for every report: what failed, then why."""

from __future__ import annotations

from tpumem.analysis.oom import COMPILE, FRAGMENTED, NOT_ENOUGH, OutOfMemory
from tpumem.units import format_bytes


def what(oom: OutOfMemory) -> str:
    """What failed, after the words "Out of memory": "at step N in op X ...: asked
    for A; B in use of limit L; largest free block F", as far as the trace knows."""
    if oom.phase == "compile":
        asked = oom.requested_bytes
        needs = f"needs {format_bytes(asked)}" if asked else "needs more"
        of = f" of the {format_bytes(oom.limit_bytes)} there is" if oom.limit_bytes else ""
        return f"compiling: XLA's plan for the program {needs}{of}"
    where = []
    if oom.step is not None:
        where.append(f"at step {oom.step}")
    if oom.op:
        where.append(f"in op {oom.op}")
    if oom.shape or oom.dtype:
        where.append(f"({' '.join(p for p in (oom.dtype, oom.shape) if p)})")
    if oom.device:
        where.append(f"on {oom.device}")
    facts = []
    if oom.requested_bytes is not None:
        facts.append(f"asked for {format_bytes(oom.requested_bytes)}")
    if oom.in_use_bytes is not None:
        limit = f" of limit {format_bytes(oom.limit_bytes)}" if oom.limit_bytes else ""
        facts.append(f"{format_bytes(oom.in_use_bytes)} in use{limit}")
    elif oom.free_bytes is not None:
        facts.append(f"{format_bytes(oom.free_bytes)} free")
    if oom.largest_free_block_bytes is not None:
        facts.append(f"largest free block {format_bytes(oom.largest_free_block_bytes)}")
    said = "; ".join(facts)
    return f"{' '.join(where)}: {said}" if where and facts else " ".join(where) or said


def why(oom: OutOfMemory) -> str:
    asked, free = format_bytes(oom.requested_bytes), format_bytes(oom.free_bytes)
    if oom.verdict == NOT_ENOUGH:
        return (
            f"not enough memory: short by {format_bytes(oom.short_by_bytes)} "
            f"({asked} asked for, {free} free)"
        )
    if oom.verdict == FRAGMENTED:
        largest = (
            f"largest {format_bytes(oom.largest_free_block_bytes)} < {asked}"
            if oom.largest_free_block_bytes is not None
            else "no free block held it (the largest is not known)"
        )
        return f"fragmentation: {free} free, but in pieces; {largest}"
    if oom.verdict == COMPILE:
        short = f", {format_bytes(oom.short_by_bytes)} too much" if oom.short_by_bytes else ""
        return f"the compiled program does not fit the device{short}"
    return "cannot tell: neither the message nor the trace says how much was free"


def oom_rows(failures: tuple[OutOfMemory, ...]) -> list[tuple[str, str]]:
    """Two rows a failure, the last one (the one that ended the run) first."""
    rows = []
    for oom in reversed(failures):
        rows.append(("Out of memory", what(oom)))
        rows.append(("Why", why(oom)))
    return rows
