"""Growth across steps, in words: whether the bytes that stay from step to step
grow once warm-up is over, and the call stacks that hold what grows."""

from __future__ import annotations

from tpumem.analysis.growth import Growth
from tpumem.report.live_rows import TOP_STACKS, frame_lines
from tpumem.units import counted, format_bytes

GROWTH_HOW = "measured (bytes live at each step's lowest point: what stays)"


GROWTH_TITLE = "Growing across steps, largest first"


GROWTH_HEADERS = ("a step", "at the last step", "call stack, innermost first")


def growth_text(growth: Growth) -> str:
    """Whether the bytes that stay from step to step grow once warm-up is over."""
    return _steps_were(growth) + _verdict(growth)


def _steps_were(growth: Growth) -> str:
    """Where nothing marked the steps, what stood for them (call_steps.py)."""
    if growth.calls_of is None:
        return ""
    return f"steps: the {len(growth.steps) + 1} calls of {growth.calls_of} (no step marks); "


def _verdict(growth: Growth) -> str:
    first = growth.steps[growth.warmup_steps]
    last = growth.steps[-1]
    warmup = f" after {counted(growth.warmup_steps, 'warm-up step')}" if growth.warmup_steps else ""
    if growth.growing:
        return (
            f"+{format_bytes(round(growth.per_step_bytes))} a step from step {first} to "
            f"step {last}" + (f" ({warmup.strip()})" if warmup else "")
        )
    low, high = (format_bytes(b) for b in growth.settled_range)
    if high == low:
        return f"no growth{warmup}: {low} stays from step {first} to step {last}"
    return (
        f"no growth{warmup}: from step {first} to step {last}, what stays goes up and "
        f"down between {low} and {high} with no upward trend"
    )


def growth_rows(growth: Growth | None) -> list[tuple[str, str, tuple[str, ...]]]:
    """The stacks holding the bytes that grow: a step's growth, what they held at
    the last step, the innermost frames."""
    if growth is None or not growth.growing:
        return []
    return [
        (
            f"+{format_bytes(round(g.per_step_bytes))}",
            format_bytes(g.end_bytes),
            frame_lines(g.frames),
        )
        for g in growth.stacks[:TOP_STACKS]
    ]
