"""Growth across steps: the bytes that stay from one training step to the next,
whether they grow step after step once the first steps are over, by how much a
step, and which call stacks hold the bytes that grow (a leak: arrays kept in a
Python list, a cache that keeps every step's outputs).

What stays is read at each step's floor: the fewest bytes in use at any moment of
the step (from its step mark to the next one's; the last step, with no mark
after it, is not read). The bytes in use at the step's very end would do in a
synchronous run, but where programs run asynchronously (PyTorch/XLA, GPUs) a
step's end catches the next graph's working memory at some steps and not at
others. The first steps allocate what stays (the optimizer's state, compiled
programs' constants): they are warm-up, told apart by where the step-to-step
changes settle. After them, memory grows steadily when most steps' floors are
higher than the one before and they rise overall.

Where the trace marks too few steps, the repeated calls of one compiled program
stand for them (call_steps.py): a loop that marks nothing is still read.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis.compiled.call_steps import call_steps
from tpumem.analysis.device_events import DeviceEvents, step_marks
from tpumem.analysis.peak import live_at
from tpumem.analysis.stacks import StackBytes, stack_bytes
from tpumem.trace.metadata import KeptArrays
from tpumem.trace.model import Trace
from tpumem.trace.stack_rows import Frame

MIN_STEPS = 4  # step ends needed to tell warm-up from growth
# The step marks that make them (a mark begins each step; the next ends it): what
# the report and `check` both say is needed.
MARKS_NEEDED = MIN_STEPS + 1
# Floors within this of the settled line are settled (the allocator rounds, a
# step's small buffers come and go), or within NOISE_SPREADS times the floors'
# median distance from it, where they scatter more (TensorFlow's BFC chunks).
SETTLED_BYTES = 64 * 1024
NOISE_SPREADS = 3.0
MOST_KEPT = 64  # containers read
RISING_SHARE = 0.75  # growing: at least this share of settled steps end higher,
# and the rise from the first settled step to the last is above the noise


@dataclass(frozen=True, slots=True)
class StackGrowth:
    frames: tuple[Frame, ...]  # the stack, outermost first
    per_step_bytes: float
    start_bytes: int  # live at the floor of the first step after warm-up
    end_bytes: int  # live at the floor of the last step read


@dataclass(frozen=True, slots=True)
class Growth:
    steps: tuple[int, ...]  # step numbers whose end is known, in order
    end_bytes: tuple[int, ...]  # bytes that stayed through each (its floor)
    warmup_steps: int  # how many of the first steps are warm-up
    per_step_bytes: float  # after warm-up: (last end - first end) / steps between
    growing: bool
    stacks: tuple[StackGrowth, ...]  # what grows, largest first (only when growing)
    # Where no marks gave the steps: the program whose calls stood for them.
    calls_of: str | None = None
    # The script's container that held most of what grew, when it ended
    # (adapters/kept_arrays.py): where the leak is kept.
    kept: KeptArrays | None = None

    @property
    def settled_range(self) -> tuple[int, int]:
        """The fewest and the most bytes that stayed through a step after warm-up."""
        settled = self.end_bytes[self.warmup_steps :]
        return min(settled), max(settled)


def step_growth(trace: Trace, events: DeviceEvents) -> Growth | None:
    """None when the trace has fewer than MIN_STEPS steps with an end."""
    times, numbers = step_marks(trace)
    if len(times):  # a step marked twice (two annotations) is one step
        first_mark = np.append(True, numbers[1:] != numbers[:-1])
        times, numbers = times[first_mark], numbers[first_mark]
    calls_of = None
    if len(times) < MARKS_NEEDED and len(events):
        calls = call_steps(trace, events, MARKS_NEEDED)
        if calls is not None:
            times, numbers, calls_of = calls.times, calls.numbers, calls.program
    if len(times) < MARKS_NEEDED or not len(events):
        return None
    # Events at one moment (a program's donated inputs freed, its outputs made)
    # are one change: only the level after the last of them counts.
    heap = events.heap
    time_ns = events.time_ns
    settled = np.append(time_ns[1:] != time_ns[:-1], True)
    starts = np.searchsorted(time_ns, times, side="left")
    floors, at = [], []
    for k in range(len(times) - 1):
        # The level the step starts at (the event before its mark), then its events.
        low, high = max(starts[k] - 1, 0), max(starts[k + 1], starts[k])
        candidates = low + np.flatnonzero(settled[low:high])
        if not len(candidates):
            candidates = np.array([low])
        index = int(candidates[np.argmin(heap[candidates])])
        floors.append(int(heap[index]) if starts[k] > 0 or index >= starts[k] else 0)
        at.append(index)
    end_bytes, floor_at = np.array(floors, np.int64), np.array(at)
    steps = numbers[:-1]
    warmup, tolerance = _warmup(end_bytes)
    first, last = warmup, len(end_bytes) - 1
    per_step = float(end_bytes[last] - end_bytes[first]) / (last - first)
    rises = np.diff(end_bytes[first:]) > 0
    growing = per_step * (last - first) > tolerance and rises.mean() >= RISING_SHARE
    stacks: tuple[StackGrowth, ...] = ()
    kept = None
    if growing:
        stacks = _growing_stacks(trace, events, floor_at[first], floor_at[last], last - first)
        kept = _kept_in(trace, events, floor_at[first], floor_at[last])
    return Growth(
        steps=tuple(int(s) for s in steps),
        end_bytes=tuple(int(b) for b in end_bytes),
        warmup_steps=warmup,
        per_step_bytes=per_step,
        growing=bool(growing),
        stacks=stacks,
        calls_of=calls_of,
        kept=kept,
    )


def _warmup(floors: np.ndarray) -> tuple[int, float]:
    """How many first steps are warm-up, and the noise of the settled floors.
    The second half of the steps is taken as settled: its level and its slope
    (the median step-to-step change) give the line the floors follow, and its
    spread about that line the noise. Warm-up lasts until the last step of the
    first half whose floor is off that line by more than the noise."""
    count = len(floors)
    middle = count // 2
    half = floors[middle:].astype(np.float64)
    slope = float(np.median(np.diff(half))) if len(half) > 1 else 0.0
    steps = np.arange(count) - middle
    level = float(np.median(half - slope * steps[middle:]))
    residual = floors - (level + slope * steps)
    noise = max(float(SETTLED_BYTES), NOISE_SPREADS * float(np.median(np.abs(residual[middle:]))))
    unsettled = np.flatnonzero(np.abs(residual[: (count + 1) // 2]) > noise)
    return (int(unsettled[-1] + 1) if len(unsettled) else 0), noise


def _kept_in(trace: Trace, events: DeviceEvents, start: int, end: int) -> KeptArrays | None:
    """The container holding most of the bytes live at `end` and not at
    `start`, where it holds at least half of them."""
    # (The largest first, as the adapter wrote them; a trace of any other
    # writer's is read for its first MOST_KEPT, so the cost stays the events'.)
    kept = (trace.metadata.kept or ())[:MOST_KEPT]
    if not kept:
        return None
    grown = np.setdiff1d(live_at(events, end), live_at(events, start))
    ids, sizes = events.buffer_id[grown], events.bytes[grown]

    def held(container: KeptArrays) -> int:
        return int(sizes[np.isin(ids, container.buffer_ids)].sum())

    best = max(kept, key=held)
    # Most of what grew, not a few arrays made anew each step (a rebuilt dict).
    return best if held(best) * 2 >= int(sizes.sum()) > 0 else None


def _growing_stacks(
    trace: Trace, events: DeviceEvents, start: int, end: int, steps: int
) -> tuple[StackGrowth, ...]:
    """The stacks whose live bytes rose from the end of warm-up to the last end."""
    before = {s.frames: s for s in stack_bytes(trace, events, live_at(events, start))}
    after = stack_bytes(trace, events, live_at(events, end))
    grown = []
    for stack in after:
        was: StackBytes | None = before.get(stack.frames)
        start_bytes = was.bytes if was is not None else 0
        if stack.bytes > start_bytes:
            grown.append(
                StackGrowth(
                    stack.frames, (stack.bytes - start_bytes) / steps, start_bytes, stack.bytes
                )
            )
    grown.sort(key=lambda g: -g.per_step_bytes)
    return tuple(grown)
