"""Two runs of one program (two versions, two settings), side by side: the change
of each device's peak, pool and fragmentation, and of the bytes live at the peak
by call stack, by line, by op and by region; with step marks in both, the peak
of each step, aligned by step number.

Lines are matched by their code, not their number, where the trace kept the code
(call stacks keep each frame's line of code): a line that moved because lines
were added above it is the same line. Frames without code are matched by number.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tpumem.analysis.device_events import step_marks
from tpumem.analysis.figures import DIFFED, DeviceFigure
from tpumem.analysis.per_step import per_step_max
from tpumem.analysis.trace_figures import DeviceAnalysis, DeviceEventFigures, TraceAnalysis
from tpumem.trace.model import Trace
from tpumem.trace.stack_rows import Frame


@dataclass(frozen=True, slots=True)
class Change:
    """Bytes of one thing (a stack, a line, an op, a region) before and after."""

    label: str | None  # the op, region or source line; None where the trace has none
    before: int
    after: int
    frames: tuple[Frame, ...] = ()  # for stacks and lines: the frames, outermost first

    @property
    def delta(self) -> int:
        return self.after - self.before


@dataclass(frozen=True, slots=True)
class FigureChange:
    """One of a device's figures in both runs (None: not available there)."""

    figure: DeviceFigure
    before: float | None
    after: float | None


# The figures diff puts side by side (analysis/figures.py).
FIGURES = DIFFED


@dataclass(frozen=True, slots=True)
class DeviceDiff:
    device: str
    before: DeviceAnalysis | None  # None: the device is in one run only
    after: DeviceAnalysis | None
    by_stack: tuple[Change, ...]  # largest change first, noise left out
    by_line: tuple[Change, ...]
    by_op: tuple[Change, ...]
    by_region: tuple[Change, ...]
    steps: tuple[tuple[int, int | None, int | None], ...]  # (step, peak before, after)
    hidden: int  # changes within the noise, left out of the lists
    figures: tuple[FigureChange, ...] = ()  # FIGURES, in both runs

    @property
    def peak_delta(self) -> int:
        return _peak(self.after) - _peak(self.before)

    @property
    def changed_steps(self) -> tuple[tuple[int, int, int], ...]:
        """The steps in both runs whose peaks differ, the largest change first."""
        both = [(s, a, b) for s, a, b in self.steps if a is not None and b is not None]
        return tuple(sorted((s for s in both if s[1] != s[2]), key=lambda s: -abs(s[2] - s[1])))


@dataclass(frozen=True, slots=True)
class RunDiff:
    before: TraceAnalysis
    after: TraceAnalysis
    devices: tuple[DeviceDiff, ...]
    noise_bytes: int
    # Two distributed runs: each process's peak before and after (its name, and
    # None where the process is in one run only); the devices above are then
    # those of the pair the AFTER run's busiest process makes.
    processes: tuple[tuple[str, int | None, int | None], ...] = ()


def _peak(device: DeviceAnalysis | None) -> int:
    return device.peak.bytes if device is not None else 0


def diff_runs(
    before: tuple[Trace, TraceAnalysis, list[DeviceEventFigures]],
    after: tuple[Trace, TraceAnalysis, list[DeviceEventFigures]],
    noise_bytes: int,
) -> RunDiff:
    """Each (trace, its analysis, its figures with events), as analyze_with_events
    gives them; changes of live bytes at the peak up to `noise_bytes` are noise
    (tpumem diff's --noise)."""
    old = {d.device: d for d in before[1].devices}
    new = {d.device: d for d in after[1].devices}
    names = [*new, *(name for name in old if name not in new)]
    scripts = (_script(before[1]), _script(after[1]))
    devices = []
    for name in names:
        pair = (old.get(name), new.get(name))
        lists = (
            _changes(pair, _stack_bytes, noise_bytes, scripts),
            _changes(pair, _line_bytes, noise_bytes, scripts),
            _changes(pair, _op_bytes, noise_bytes, scripts),
            _changes(pair, _region_bytes, noise_bytes, scripts),
        )
        steps = _aligned_steps(name, before, after)
        hidden = sum(count for _, count in lists)
        figures = tuple(
            FigureChange(
                figure,
                figure.value(pair[0]) if pair[0] is not None else None,
                figure.value(pair[1]) if pair[1] is not None else None,
            )
            for figure in FIGURES
        )
        by_stack, by_line, by_op, by_region = (changes for changes, _ in lists)
        devices.append(
            DeviceDiff(
                name, pair[0], pair[1], by_stack, by_line, by_op, by_region, steps, hidden, figures
            )
        )
    devices.sort(key=lambda d: -abs(d.peak_delta))
    return RunDiff(before[1], after[1], tuple(devices), noise_bytes)


# Each breakdown: the device's live bytes at the peak as {key: (label, bytes, frames)}.
Breakdown = dict[object, tuple[str | None, int, tuple[Frame, ...]]]
# The key of the run's own script's file: two versions of one script may have two
# names (before.py, after.py), and their lines are still the same lines.
THE_SCRIPT = "<the script>"


def _script(analysis: TraceAnalysis) -> str | None:
    """The file name of the script the run ran, if it ran one."""
    command = analysis.metadata.command or ()
    first = command[0] if command else None
    return os.path.basename(first) if first and first.endswith(".py") else None


def _changes(
    pair: tuple[DeviceAnalysis | None, DeviceAnalysis | None],
    breakdown: Callable[[DeviceAnalysis, str | None], Breakdown],
    noise_bytes: int,
    scripts: tuple[str | None, str | None],
) -> tuple[tuple[Change, ...], int]:
    """The changes beyond the noise, largest first, and how many were within it."""
    old = breakdown(pair[0], scripts[0]) if pair[0] is not None else {}
    new = breakdown(pair[1], scripts[1]) if pair[1] is not None else {}
    changes, hidden = [], 0
    for key in [*new, *(k for k in old if k not in new)]:
        label, after, frames = new.get(key, (None, 0, ()))
        old_label, before, old_frames = old.get(key, (None, 0, ()))
        change = Change(label or old_label, before, after, frames or old_frames)
        if abs(change.delta) > noise_bytes:
            changes.append(change)
        elif change.delta:
            hidden += 1
    changes.sort(key=lambda c: (-abs(c.delta), c.label or ""))
    return tuple(changes), hidden


def _frame_key(frame: Frame, script: str | None) -> tuple[str, str, str | int]:
    """A frame as the same line in two versions: its file's name (two checkouts
    of a script lie in two directories; the run's own script, whatever its
    name), its function and its code where kept."""
    name = os.path.basename(frame.file)
    return (THE_SCRIPT if name == script else name, frame.function, frame.code or frame.line)


def _add(
    found: Breakdown, key: object, label: str | None, size: int, frames: tuple[Frame, ...]
) -> None:
    _, bytes_before, kept = found.get(key, (label, 0, frames))
    found[key] = (label, bytes_before + size, kept)


def _stack_bytes(device: DeviceAnalysis, script: str | None) -> Breakdown:
    found: Breakdown = {}
    for stack in device.peak.stacks:
        key = tuple(_frame_key(f, script) for f in stack.frames)
        _add(found, key, None, stack.bytes, stack.frames)
    return found


def _line_bytes(device: DeviceAnalysis, script: str | None) -> Breakdown:
    """By the innermost frame of each stack; without stacks, by source line."""
    found: Breakdown = {}
    if any(stack.frames for stack in device.peak.stacks):
        for stack in device.peak.stacks:
            frames = stack.frames[-1:]
            _add(found, tuple(_frame_key(f, script) for f in frames), None, stack.bytes, frames)
        return found
    for group in device.peak.groups:
        key = group.source
        if script and key and key.startswith(f"{script}:"):
            key = THE_SCRIPT + key[len(script) :]
        _add(found, key, group.source, group.bytes, ())
    return found


def _op_bytes(device: DeviceAnalysis, script: str | None) -> Breakdown:
    found: Breakdown = {}
    for group in device.peak.groups:
        _add(found, group.op, group.op, group.bytes, ())
    return found


def _region_bytes(device: DeviceAnalysis, script: str | None) -> Breakdown:
    return {region: (region, size, ()) for region, size in device.peak.by_region}


def _aligned_steps(
    device: str,
    before: tuple[Trace, TraceAnalysis, list[DeviceEventFigures]],
    after: tuple[Trace, TraceAnalysis, list[DeviceEventFigures]],
) -> tuple[tuple[int, int | None, int | None], ...]:
    """Each step's peak in both runs, by step number; none unless both have steps."""
    peaks = [dict(_step_peaks(device, *run)) for run in (before, after)]
    if not peaks[0] or not peaks[1]:
        return ()
    numbers = sorted(set(peaks[0]) | set(peaks[1]))
    return tuple((n, peaks[0].get(n), peaks[1].get(n)) for n in numbers)


def _step_peaks(
    device: str, trace: Trace, _: TraceAnalysis, figures: Iterable[DeviceEventFigures]
) -> list[tuple[int, int]]:
    times, numbers = step_marks(trace)
    for figure in figures:
        if figure.events.device == device:
            found = per_step_max(figure.events.time_ns, figure.events.in_use, times, numbers)
            return [(step, int(value)) for step, value in found]
    return []
