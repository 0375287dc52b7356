"""`tpumem diff` in words and JSON: what changed between two runs, device by
device. The figures come from analysis/difference.py; this module words them."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from tpumem.analysis.difference import Change, DeviceDiff, RunDiff
from tpumem.analysis.summary import DeviceAnalysis
from tpumem.report.json_report import dump, finite
from tpumem.report.text import string_console
from tpumem.report.visible import markdown, visible
from tpumem.units import format_bytes

DIFF_SCHEMA = "tpumem-diff/1"
TOP_CHANGES = 10
FIGURE_HEADERS = ("", "before", "after", "change")
CHANGE_HEADERS = ("change", "before", "after")
BREAKDOWNS = (
    ("by_line", "line"),
    ("by_stack", "call stack, innermost first"),
    ("by_op", "op"),
    ("by_region", "region"),
)


def signed_bytes(count: int) -> str:
    return ("+" if count > 0 else "-" if count < 0 else "±") + format_bytes(abs(count))


def _share(before: int, after: int) -> str:
    return f" ({(after - before) / before:+.1%})" if before else ""


def figure_rows(diff: DeviceDiff) -> list[tuple[str, str, str, str]]:
    """Peak, pool and fragmentation at the peak: before, after, the change."""
    old, new = diff.before, diff.after

    def size(device: DeviceAnalysis | None, read) -> int | None:
        return read(device) if device is not None else None

    rows = []
    for name, read in (
        ("Peak in use", lambda d: d.peak.bytes),
        ("Pool held from device", lambda d: d.preallocation.pool_peak_bytes),
        ("Fragmentation headroom", lambda d: d.headroom_bytes),
    ):
        a, b = size(old, read), size(new, read)
        change = "-" if a is None or b is None else signed_bytes(b - a) + _share(a, b)
        rows.append((name, format_bytes(a), format_bytes(b), change))
    a = old.fragmentation.at_peak if old is not None else None
    b = new.fragmentation.at_peak if new is not None else None
    change = "-" if a is None or b is None else f"{b - a:+.3f}"
    rows.append(
        (
            "Fragmentation at peak",
            "-" if a is None else f"{a:.3f}",
            "-" if b is None else f"{b:.3f}",
            change,
        )
    )
    return rows


def change_rows(changes: tuple[Change, ...]) -> list[tuple[str, str, str, str]]:
    return [
        (signed_bytes(c.delta), format_bytes(c.before), format_bytes(c.after), c.name)
        for c in changes[:TOP_CHANGES]
    ]


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
            for row in change_rows(changes):
                table.add_row(*(Text(visible(cell)) for cell in row))
            console.print(table)
        if not any(getattr(device, field) for field, _ in BREAKDOWNS):
            console.print("No change of live bytes at the peak beyond the noise.")
        console.print(_noise_note(diff, device), style="dim")
        if device.steps:
            changed = [s for s in device.steps if None not in s[1:] and s[1] != s[2]]
            console.print(
                f"Peak of each step, aligned by step number: {len(device.steps):,} steps, "
                f"{len(changed):,} with a different peak"
                + (f"; most: step {_most(changed)}" if changed else ""),
                style="dim",
            )
    return buffer.getvalue()


def _most(steps: list[tuple[int, int | None, int | None]]) -> str:
    step, before, after = max(steps, key=lambda s: abs((s[2] or 0) - (s[1] or 0)))
    return f"{step} ({format_bytes(before)} → {format_bytes(after)})"


def render_diff_markdown(diff: RunDiff, *, width: int = 100, color: bool = False) -> str:
    lines = [
        f"# tpumem diff: {markdown(diff.before.path or '')} → {markdown(diff.after.path or '')}",
    ]
    for device in diff.devices:
        lines += ["", f"## {markdown(device_title(device))}", ""]
        lines += _md_table(FIGURE_HEADERS, figure_rows(device))
        for field, title in BREAKDOWNS:
            changes = getattr(device, field)
            if changes:
                lines += ["", f"Live at the peak, change by {title.split(',')[0]}:", ""]
                lines += _md_table((*CHANGE_HEADERS, title), change_rows(changes))
        lines += ["", _noise_note(diff, device)]
    return "\n".join(lines) + "\n"


def _md_table(headers: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return lines + ["| " + " | ".join(markdown(c) for c in row) + " |" for row in rows]


def diff_dict(diff: RunDiff) -> dict[str, Any]:
    return {
        "schema": DIFF_SCHEMA,
        "before": diff.before.path,
        "after": diff.after.path,
        "noise_bytes": diff.noise_bytes,
        "devices": [_device(device) for device in diff.devices],
    }


def _device(device: DeviceDiff) -> dict[str, Any]:
    def figure(read) -> dict[str, Any]:
        return {
            "before": read(device.before) if device.before is not None else None,
            "after": read(device.after) if device.after is not None else None,
        }

    return {
        "device": device.device,
        "peak_bytes": figure(lambda d: d.peak.bytes),
        "pool_bytes": figure(lambda d: d.preallocation.pool_peak_bytes),
        "headroom_bytes": figure(lambda d: d.headroom_bytes),
        "fragmentation_at_peak": figure(lambda d: d.fragmentation.at_peak),
        **{field: [_change(c) for c in getattr(device, field)] for field, _ in BREAKDOWNS},
        "hidden_changes": device.hidden,
        "steps": [{"step": s, "before": a, "after": b} for s, a, b in device.steps],
    }


def _change(change: Change) -> dict[str, Any]:
    return {
        "name": change.name,
        "before": change.before,
        "after": change.after,
        "change": change.delta,
        "frames": [
            {"file": f.file, "line": f.line, "function": f.function, "code": f.code}
            for f in change.frames
        ],
    }


def render_diff_json(diff: RunDiff, *, width: int = 100, color: bool = False) -> str:
    return dump(finite(diff_dict(diff)), indent=2) + "\n"
