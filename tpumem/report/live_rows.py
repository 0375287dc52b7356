"""What is live at a peak, in words: the largest groups of buffers, the call
stacks that hold the most, and the bytes whose allocation the capture missed."""

from __future__ import annotations

from tpumem.analysis.peak import LiveGroup, PeakBreakdown
from tpumem.analysis.stacks import StackBytes
from tpumem.trace.stack_rows import Frame
from tpumem.units import format_bytes

TOP_GROUPS = 10


TOP_STACKS = 5


STACK_FRAMES = 8  # a stack's innermost frames shown; the rest counted


GROUP_HEADERS = ("bytes", "buffers", "op", "region", "shape", "source")  # shape: dtype[dims]
STACK_HEADERS = ("bytes", "buffers", "call stack, innermost first")


STACKS_TITLE = "Call stacks at peak, largest first"


NO_STACK = "(no call stack recorded)"


def group_rows(
    groups: tuple[LiveGroup, ...], unseen_bytes: int = 0, unseen_where: str = ""
) -> list[tuple[str, ...]]:
    """The largest groups; with `unseen_bytes`, the bytes in use at the peak whose
    allocations the capture did not see, as a row of their own in its place by
    size, with where they were made (`unseen_where`, see made_unseen)."""
    sized: list[tuple[int, LiveGroup | None]] = [(g.bytes, g) for g in groups[:TOP_GROUPS]]
    if unseen_bytes:
        sized.append((unseen_bytes, None))
        sized.sort(key=lambda item: -item[0])
    rows: list[tuple[str, ...]] = []
    for size, group in sized:
        if group is None:
            where = unseen_where or UNSEEN_WHERE
            rows.append((format_bytes(size), "-", UNSEEN, "-", "-", where))
            continue
        rows.append(
            (
                format_bytes(group.bytes),
                f"{group.count:,}",
                group.op or "-",
                group.region or "-",
                f"{group.dtype or ''}{group.shape or ''}" or "-",
                group.source or "-",
            )
        )
    return rows


UNSEEN = "allocated unseen"


UNSEEN_WHERE = "- (in use by the counters; its allocation was not captured)"


def made_unseen(peak: PeakBreakdown) -> str:
    """Where the bytes allocated unseen at the peak can have been made: before
    the capture began (the allocator already held bytes) and in the capture's gaps
    before the peak (profiler sessions switching record nothing)."""
    gaps = peak.gaps_before_peak
    in_gaps = (
        "in the gap between profiler sessions"
        if gaps == 1
        else (f"in the {gaps:,} gaps between profiler sessions")
    )
    fewer = "; a longer --chunk leaves fewer gaps"
    if peak.held_before_capture_bytes and gaps:
        return f"- (made before the capture began or {in_gaps}{fewer})"
    if peak.held_before_capture_bytes:
        return "- (made before the capture began)"
    if gaps:
        return f"- (made {in_gaps} before the peak{fewer})"
    return UNSEEN_WHERE


def stack_rows(stacks: tuple[StackBytes, ...]) -> list[tuple[str, str, tuple[str, ...]]]:
    """The largest stacks: bytes, buffers and the innermost frames (each shown
    as the trace named it: renderers make it visible); none when the trace
    recorded no stacks."""
    if not any(stack.frames for stack in stacks):
        return []
    return [
        (format_bytes(stack.bytes), f"{stack.buffers:,}", frame_lines(stack.frames))
        for stack in stacks[:TOP_STACKS]
    ]


def frame_text(frame: Frame) -> str:
    return f"{frame.location} in {frame.function}"


def frame_lines(stack: tuple) -> tuple[str, ...]:
    """A stack's innermost frames as lines, the rest counted."""
    frames = [frame_text(f) for f in reversed(stack)]
    if len(frames) > STACK_FRAMES:
        frames = [*frames[:STACK_FRAMES], f"… {len(frames) - STACK_FRAMES} more"]
    return tuple(frames or [NO_STACK])
