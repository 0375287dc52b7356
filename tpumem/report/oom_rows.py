"""An out-of-memory failure in words, for every report: what failed, then why;
and what a capacity asked about would give (the allocator model's replay)."""

from __future__ import annotations

from tpumem.analysis.allocators.capacity import SEGMENTS, CapacityCheck
from tpumem.analysis.oom import COMPILE, FRAGMENTED, KILLED, LIMIT, NOT_ENOUGH, OutOfMemory
from tpumem.analysis.oom_causes import KEPT, PIECES, ROUNDING, OomCause
from tpumem.units import counted, format_bytes, format_seconds

SHOWN_CHECKS = 8  # devices told a row each; the rest are counted


def what(oom: OutOfMemory) -> str:
    """What failed, after the words "Out of memory": "at step N in op X ...: asked
    for A; B in use of limit L; largest free block F", as far as the trace knows."""
    if oom.phase == KILLED:
        return oom.message
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
    if oom.location:
        where.append(f"from {oom.location}")
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
    if oom.phase == KILLED:
        return (
            "the kernel kills a process with SIGKILL, and says nothing to it, when memory "
            "runs out; the figures above make that likely, not certain"
        )
    if oom.verdict == COMPILE:
        short = f", {format_bytes(oom.short_by_bytes)} too much" if oom.short_by_bytes else ""
        return f"the compiled program does not fit the device{short}"
    if oom.verdict == LIMIT:
        return (
            f"a limit refused it: the device had room ({free} free with what the allocator "
            f"held unused) for the {asked} asked; raise the limit "
            "(torch.cuda.set_per_process_memory_fraction) or keep less"
        )
    free_and_refused = (
        oom.free_bytes is not None
        and oom.requested_bytes is not None
        and oom.free_bytes >= oom.requested_bytes
    )
    if free_and_refused:  # (more was free than asked, and still it failed)
        return (
            f"{free} free in all, more than the {asked} asked for: a limit refused it "
            "(PyTorch: set_per_process_memory_fraction, which a snapshot does not record) "
            "or no free piece was large enough"
        )
    return "cannot tell: neither the message nor the trace says how much was free"


def oom_rows(failures: tuple[OutOfMemory, ...]) -> list[tuple[str, str]]:
    """Two rows a failure, the last one (the one that ended the run) first, and
    where its memory went, with the change, where the events show it."""
    rows = []
    for oom in reversed(failures):
        rows.append(("Out of memory", what(oom)))
        rows.append(("Why", why(oom)))
        rows += [("Where it went", cause_text(c)) for c in oom.causes]
    return rows


def cause_text(cause: OomCause) -> str:
    """A cause of the failure with its share, and what to change (oom_causes.py)."""
    head = f"{format_bytes(cause.bytes)} ({cause.share:.0%} of {cause.of}) {cause.cause}"
    if cause.cause == ROUNDING:
        asked, given = format_bytes(cause.asked_bytes), format_bytes(cause.given_bytes)
        return (
            f"{head}: {counted(cause.count, 'request')} of {asked} "
            f"{'each ' if cause.count > 1 else ''}got a chunk of {given} (BFC splits "
            "a free chunk only when it is twice the request), bytes no array uses. Requests "
            "of the sizes freed before them, or the large arrays made after the small ones, "
            f"reuse the chunks whole ({cause.how})"
        )
    if cause.cause == PIECES:
        return (
            f"{head}: free, but outside the largest free block; fewer sizes, or the "
            f"long-lived arrays made first, keep the free memory in one piece ({cause.how})"
        )
    if cause.cause == KEPT and cause.steps is not None:
        made = f", most by {cause.line}" if cause.line else ""
        return (
            f"{head}: {cause.count:,} arrays made in steps {cause.steps[0]} to {cause.steps[1]}"
            f"{made}, still live: a step's state lasts one step; keep what a step reports "
            f"as a Python number (float(x)), not the device array ({cause.how})"
        )
    program = f" of {cause.program}" if cause.program else ""
    return (
        f"{head}: the working memory{program} live at the failure; rematerialization or a "
        f"smaller batch shrinks it ({cause.how})"
    )


def shown_checks(checks: tuple[CapacityCheck, ...]) -> tuple[CapacityCheck, ...]:
    """The devices a report tells of: those that run out first, then the rest."""
    return tuple(sorted(checks, key=lambda c: c.failure is None)[:SHOWN_CHECKS])


def capacity_rows(checks: tuple[CapacityCheck, ...]) -> list[tuple[str, str]]:
    """Per device: what the capacity gives (the modeled failure, or the headroom
    where it holds), and the smallest capacity that holds the run."""
    rows = []
    shown = shown_checks(checks)
    for check in shown:
        label = f"At {format_bytes(check.capacity_bytes)}"
        if check.failure is not None:
            rows.append((label, f"out of memory (modeled) {what(check.failure)}"))
            rows.append(("Why", why(check.failure)))
        else:
            when = format_seconds(check.tightest_time_ns) if check.tightest_time_ns else "-"
            if check.tightest_step is not None:
                when = f"step {check.tightest_step}, {when}"
            rows.append(
                (
                    label,
                    f"fits (modeled) on {check.device}, with "
                    f"{format_bytes(check.headroom_bytes)} headroom at the tightest moment "
                    f"({when})",
                )
            )
        smallest = (
            format_bytes(check.smallest_bytes)
            if check.smallest_bytes is not None
            else "none found: the model does not hold the run even unlimited"
        )
        model = (
            f"modeled: {SEGMENTS}"
            if check.pool_growth == SEGMENTS
            else f"modeled: BFC's pool {check.pool_growth}"
        )
        if check.unplaced_frees:
            model += (
                f"; {check.unplaced_frees:,} frees of buffers allocated before the capture "
                "are not in it, so it may count too little in use"
            )
        rows.append(("Smallest that holds it", f"{smallest} on {check.device} ({model})"))
    rest = [c for c in checks if all(c is not s for s in shown)]
    if rest:
        failing = sum(1 for c in rest if c.failure is not None)
        rows.append(
            (
                "Other devices",
                f"{len(rest):,} more at {format_bytes(rest[0].capacity_bytes)}: "
                f"{failing:,} run out of memory (modeled), {len(rest) - failing:,} fit",
            )
        )
    return rows
