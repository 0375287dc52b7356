"""`tpumem diff` in words and JSON: what changed between two runs, device by
device. The figures come from analysis/difference.py; this module words them."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from tpumem.analysis.difference import FIGURES, Change, DeviceDiff, RunDiff
from tpumem.analysis.figures import BYTES, COUNT, TIME
from tpumem.report.escapes import markdown, visible
from tpumem.report.figure_values import format_change, format_signed, format_value
from tpumem.report.json_report import FRAMES, dump, finite
from tpumem.report.json_shapes import (
    INT,
    NUMBER,
    STRING,
    Array,
    Const,
    Object,
    Optional,
    Shape,
    item,
    key,
)
from tpumem.report.live_rows import frame_text
from tpumem.report.markdown import md_table
from tpumem.report.text import string_console
from tpumem.units import format_bytes

DIFF_SCHEMA = "tpumem-diff/2"
TOP_CHANGES = 10
FIGURE_HEADERS = ("", "before", "after", "change")
CHANGE_HEADERS = ("change", "before", "after")
BREAKDOWNS = (
    ("by_line", "line"),
    ("by_stack", "call stack, innermost first"),
    ("by_op", "op"),
    ("by_region", "region"),
)


PROCESS_PEAKS_TITLE = "Each process's peak (its busiest device)"


def figure_rows(diff: DeviceDiff) -> list[tuple[str, str, str, str]]:
    """Each figure diff shows (analysis/figures.py): before, after, the change."""
    return [
        (
            change.figure.title,
            format_value(change.figure.unit, change.before),
            format_value(change.figure.unit, change.after),
            format_change(change.figure.unit, change.before, change.after),
        )
        for change in diff.figures
    ]


# What a change without a label is, per breakdown.
UNNAMED = {
    "by_line": "(no call stack or source line)",
    "by_stack": "(no call stack)",
    "by_op": "(no op)",
    "by_region": "(no region)",
}


def change_name(change: Change, field: str) -> str:
    """A change's line, stack (innermost first), op or region, in words."""
    if change.frames:
        return " ← ".join(frame_text(f) for f in reversed(change.frames))
    return change.label or UNNAMED[field]


def change_rows(changes: tuple[Change, ...], field: str) -> list[tuple[str, str, str, str]]:
    return [
        (
            format_signed(BYTES, c.delta),
            format_bytes(c.before),
            format_bytes(c.after),
            change_name(c, field),
        )
        for c in changes[:TOP_CHANGES]
    ]


PROCESS_HEADERS = ("process", "before", "after", "change")


def process_rows(diff: RunDiff) -> list[tuple[str, str, str, str]]:
    """Two distributed runs: each process's peak, before and after."""
    return [
        (name, format_bytes(before), format_bytes(after), format_change(BYTES, before, after))
        for name, before, after in diff.processes
    ]


def pair_note(diff: RunDiff) -> str:
    return (
        f"Below, in full: AFTER's busiest process ({diff.after.path}) against its "
        f"counterpart in BEFORE ({diff.before.path})."
    )


def frameworks_note(diff: RunDiff) -> str | None:
    """Where the two runs are of two frameworks: a diff reads as one program's
    change, and theirs is as much their allocators' (names as the traces give
    them: the caller escapes them)."""
    before, after = diff.before.framework, diff.after.framework
    if before == after:
        return None
    return (
        f"The runs are of two frameworks: BEFORE {before}, AFTER {after}. Each allocator "
        "places and pools buffers its own way, so the changes below are the frameworks' "
        "as much as the program's."
    )


def device_title(diff: DeviceDiff) -> str:
    if diff.before is None:
        return f"{diff.device} (in the second run only)"
    if diff.after is None:
        return f"{diff.device} (in the first run only)"
    return diff.device


def _noise_note(diff: RunDiff, device: DeviceDiff) -> str:
    return (
        f"Changes of live bytes at the peak within {format_bytes(diff.noise_bytes)} are "
        f"left out as noise ({device.hidden:,} such)."
    )


def render_diff_text(diff: RunDiff, *, width: int = 100, color: bool = False) -> str:
    console, buffer = string_console(width, color)
    console.print(
        Text(f"tpumem diff · {visible(diff.before.path)} → {visible(diff.after.path)}"),
        style="bold",
    )
    frameworks = frameworks_note(diff)
    if frameworks is not None:
        console.print(Text(visible(frameworks)), style="yellow")
    if diff.processes:
        table = Table(title=Text(PROCESS_PEAKS_TITLE), title_justify="left")
        for header in PROCESS_HEADERS:
            table.add_column(header, justify="left" if header == "process" else "right")
        for row in process_rows(diff):
            table.add_row(*(Text(visible(cell)) for cell in row))
        console.print(table)
        console.print(Text(visible(pair_note(diff))))
    if not diff.devices:
        console.print("Neither run has allocation events.")
    for device in diff.devices:
        console.rule(Text(visible(device_title(device))))
        table = Table(box=None, pad_edge=False)
        for header in FIGURE_HEADERS:
            table.add_column(header, justify="left" if not header else "right")
        for row in figure_rows(device):
            table.add_row(*(Text(cell) for cell in row))
        console.print(table)
        for field, title in BREAKDOWNS:
            changes = getattr(device, field)
            if not changes:
                continue
            table = Table(
                title=Text(f"Live at the peak, change by {title.split(',')[0]}"),
                title_justify="left",
            )
            for header in (*CHANGE_HEADERS, title):
                table.add_column(header, justify="right" if header in CHANGE_HEADERS else "left")
            for row in change_rows(changes, field):
                table.add_row(*(Text(visible(cell)) for cell in row))
            console.print(table)
        if not any(getattr(device, field) for field, _ in BREAKDOWNS):
            console.print("No change of live bytes at the peak beyond the noise.")
        console.print(_noise_note(diff, device), style="dim")
        if device.steps:
            changed = device.changed_steps
            most = ""
            if changed:
                step, before, after = changed[0]
                most = f"; most: step {step} ({format_bytes(before)} → {format_bytes(after)})"
            console.print(
                f"Peak of each step, aligned by step number: {len(device.steps):,} steps, "
                f"{len(changed):,} with a different peak{most}",
                style="dim",
            )
    return buffer.getvalue()


def render_diff_markdown(diff: RunDiff, *, width: int = 100, color: bool = False) -> str:
    lines = [
        f"# tpumem diff: {markdown(diff.before.path or '')} → {markdown(diff.after.path or '')}",
    ]
    frameworks = frameworks_note(diff)
    if frameworks is not None:
        lines += ["", markdown(frameworks)]
    if diff.processes:
        lines += ["", f"{PROCESS_PEAKS_TITLE}:", ""]
        lines += md_table(PROCESS_HEADERS, process_rows(diff))
        lines += ["", markdown(pair_note(diff))]
    for device in diff.devices:
        lines += ["", f"## {markdown(device_title(device))}", ""]
        lines += md_table(FIGURE_HEADERS, figure_rows(device))
        for field, title in BREAKDOWNS:
            changes = getattr(device, field)
            if changes:
                lines += ["", f"Live at the peak, change by {title.split(',')[0]}:", ""]
                lines += md_table((*CHANGE_HEADERS, title), change_rows(changes, field))
        lines += ["", _noise_note(diff, device)]
    return "\n".join(lines) + "\n"


def _both(unit: str) -> Object:
    """A figure in both runs, each a number of its unit (null where not available)."""
    shape = INT if unit in (BYTES, COUNT, TIME) else NUMBER
    return Object((key("before", Optional(shape)), key("after", Optional(shape))))


def _figure(name: str) -> Any:
    """The device's change of the figure of that key."""
    return lambda changes: next(c for c in changes if c.figure.key == name)


def _peaks(name: str, shape: Shape) -> Object:
    """A (name, peak before, peak after) row: a step's, a process's."""
    return Object(
        (
            key(name, shape, item(0)),
            key("before", Optional(INT), item(1)),
            key("after", Optional(INT), item(2)),
        )
    )


def _named(field: str) -> Any:
    """A breakdown's changes, each with its breakdown (which names it)."""
    return lambda device: [(change, field) for change in getattr(device, field)]


CHANGE = Object(
    (
        key("name", STRING, lambda pair: change_name(*pair)),
        key("before", INT, lambda pair: pair[0].before),
        key("after", INT, lambda pair: pair[0].after),
        key("change", INT, lambda pair: pair[0].delta),
        key("frames", FRAMES, lambda pair: pair[0].frames),
    )
)
DEVICE = Object(
    (
        key("device", STRING),
        key(
            "figures",
            Object(
                tuple(key(f.key, _both(f.unit), _figure(f.key)) for f in FIGURES),
                about="each figure (analysis/figures.py, by its key) in both runs; null where "
                "a run has no such figure or not the device",
            ),
            "figures",
        ),
        *(key(field, Array(CHANGE), _named(field)) for field, _ in BREAKDOWNS),
        key("hidden_changes", INT, "hidden"),
        key("steps", Array(_peaks("step", INT))),
    )
)
DIFF = Object(
    (
        key("schema", Const(DIFF_SCHEMA), lambda _: DIFF_SCHEMA),
        key("before", Optional(STRING), lambda d: d.before.path),
        key("after", Optional(STRING), lambda d: d.after.path),
        key("noise_bytes", INT),
        key(
            "frameworks",
            Object(
                (
                    key("before", STRING, lambda d: d.before.framework),
                    key("after", STRING, lambda d: d.after.framework),
                ),
                about="each run's framework, as its trace names it: where they differ, the "
                "text, markdown and HTML diffs say so in a line, since two allocators place "
                "and pool buffers each its own way",
            ),
            lambda d: d,
        ),
        key("devices", Array(DEVICE)),
        key(
            "processes",
            Array(_peaks("process", STRING)),
            about="two distributed runs (directories): each process's peak on its busiest "
            "device, before and after (null where the process is in one run only); `before`, "
            "`after` and `devices` are then those of the pair AFTER's busiest process makes; "
            "empty for two traces",
        ),
    ),
    title="tpumem diff",
    about="What changed between two runs, device by device: peak, pool, fragmentation, and "
    "the bytes live at the peak by line, call stack, op and region (changes within "
    "noise_bytes left out).",
)


def diff_dict(diff: RunDiff) -> dict[str, Any]:
    return DIFF.write(diff)


def render_diff_json(diff: RunDiff, *, width: int = 100, color: bool = False) -> str:
    return dump(finite(diff_dict(diff)), indent=2) + "\n"
