"""A distributed run in words, JSON and HTML: each process's figures, their spread
across processes, and the busiest process's whole report. The figures come from
analysis/processes.py; this module words them."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from tpumem.analysis.figures import SHARE
from tpumem.analysis.processes import ProcessRun, ProcessSummary, Spread
from tpumem.report.escapes import markdown, visible
from tpumem.report.figure_values import format_value
from tpumem.report.markdown import md_table, render_markdown
from tpumem.report.rows import ending_text
from tpumem.report.text import render_text, string_console
from tpumem.units import counted, format_bytes

PROCESS_HEADERS = ("process", "host", "peak", "device", "at step", "pool", "fragmentation", "ended")
SPREAD_HEADERS = ("", "highest", "lowest", "mean", "difference")


PROCESSES_TITLE = "Each process (peak: its busiest device)"
SPREAD_TITLE = "Spread across processes"


def _value(spread: Spread, value: float) -> str:
    return format_value(spread.figure.unit, value)


def process_rows(run: ProcessRun) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for process in run.processes:
        busiest = " (busiest)" if process is run.processes[run.busiest_at] else ""
        rows.append(
            (
                process.name + busiest,
                process.host or "?",
                format_bytes(process.peak_bytes),
                process.peak_device or "-",
                "-" if process.peak_step is None else f"{process.peak_step:,}",
                format_bytes(process.pool_bytes),
                format_value(SHARE, process.fragmentation_at_peak),
                _ended(process),
            )
        )
    return rows


def _ended(process: ProcessSummary) -> str:
    """How a process ended, short enough for the table."""
    ended = process.exit
    if process.running:
        return "running"
    if not process.complete and (ended is None or not ended.signal):
        return "unclosed (killed?)"
    if ended is not None and ended.code is not None and not (ended.signal or ended.exception):
        return f"exit {ended.code}"
    return ending_text(ended, process.complete, process.source)


def spread_rows(run: ProcessRun) -> list[tuple[str, ...]]:
    processes = run.processes

    def who(at: int, spread: Spread) -> str:
        return "all" if spread.difference == 0 else processes[at].name

    return [
        (
            spread.figure.title,
            f"{_value(spread, spread.highest)} ({who(spread.highest_at, spread)})",
            f"{_value(spread, spread.lowest)} ({who(spread.lowest_at, spread)})",
            _value(spread, spread.mean),
            _value(spread, spread.difference),
        )
        for spread in run.spreads
    ]


def imbalance_text(run: ProcessRun) -> str:
    """The peak's spread in one sentence: who holds more, and how much."""
    peak, processes = run.peak, run.processes
    if len(processes) < 2:
        return "One process: no spread to show."
    if peak.difference == 0:
        return f"Every process peaks at {format_bytes(peak.highest)}."
    high, low = processes[peak.highest_at], processes[peak.lowest_at]
    step = f" (step {high.peak_step:,})" if high.peak_step is not None else ""
    return (
        f"{high.name} peaks highest{step}: {format_bytes(peak.difference)} more than "
        f"{low.name} ({peak.imbalance:.1%} of its peak)."
    )


def notes(run: ProcessRun) -> list[str]:
    """What the reader must know about the run as a whole."""
    said = []
    if len(run.run_ids) > 1:
        said.append(
            f"these traces come from {len(run.run_ids)} different runs "
            f"({', '.join(run.run_ids)}): their spread mixes runs"
        )
    if run.missing_ranks:
        said.append(f"no trace of {_ranks(run.missing_ranks)}: the spread is of the others")
    if run.repeated_ranks:
        said.append(f"more than one trace says it is {_ranks(run.repeated_ranks)}")
    for path, why in run.unreadable:
        said.append(f"left out {path}: {why}")
    return said + _summarised_here(run)


def _summarised_here(run: ProcessRun) -> list[str]:
    """The processes read from their traces here, not from their recordings'
    summaries: one line for each reason, naming the first few."""
    by_why: dict[str, list[str]] = {}
    for path, why in run.summarised_here:
        by_why.setdefault(why, []).append(path)
    said = []
    for why, paths in by_why.items():
        if len(paths) == 1:
            said.append(f"{paths[0]} was read in full here: {why}")
            continue
        named = ", ".join(paths[:3]) + (f" and {len(paths) - 3:,} more" if len(paths) > 3 else "")
        said.append(f"{len(paths):,} traces were read in full here ({named}): {why}")
    return said


def _ranks(ranks: tuple[int, ...]) -> str:
    shown = ", ".join(str(r) for r in ranks[:12]) + (", ..." if len(ranks) > 12 else "")
    return ("rank " if len(ranks) == 1 else "ranks ") + shown


def _title(run: ProcessRun, where: str) -> str:
    ids = f", run {run.run_ids[0]}" if len(run.run_ids) == 1 else ""
    return f"{where} ({counted(len(run.processes), 'process', 'processes')}{ids})"


def busiest_title(run: ProcessRun) -> str:
    busiest = run.processes[run.busiest_at]
    return f"The busiest process: {busiest.name} ({busiest.path})"


def render_run_text(
    run: ProcessRun, where: str, *, width: int = 100, color: bool = False, full: bool = True
) -> str:
    console, buffer = string_console(width, color)
    console.print(Text("tpumem report · " + visible(_title(run, where))), style="bold")
    for note in notes(run):
        console.print(Text("warning: ", style="yellow") + Text(visible(note)))
    table = Table(title=Text(PROCESSES_TITLE), title_justify="left")
    for header in PROCESS_HEADERS:
        left = header in ("process", "host")
        table.add_column(header, justify="left" if left else "right", no_wrap=header == "process")
    for row in process_rows(run):
        table.add_row(*(Text(visible(cell)) for cell in row))
    console.print(table)
    spread = Table(title=Text(SPREAD_TITLE), title_justify="left")
    for header in SPREAD_HEADERS:
        spread.add_column(header, justify="left" if not header else "right")
    for row in spread_rows(run):
        spread.add_row(*(Text(visible(cell)) for cell in row))
    console.print(spread)
    console.print(Text(visible(imbalance_text(run))))
    console.rule(Text(visible(busiest_title(run))))
    return buffer.getvalue() + render_text(run.busiest, width=width, color=color, full=full)


def render_run_markdown(
    run: ProcessRun, where: str, *, width: int = 100, color: bool = False
) -> str:
    lines = [f"# tpumem report: {markdown(_title(run, where))}", ""]
    lines += [f"> warning: {markdown(note)}" for note in notes(run)]
    lines += ["", "Each process (peak: its busiest device):", ""]
    lines += md_table(PROCESS_HEADERS, process_rows(run))
    lines += ["", "Spread across processes:", ""]
    lines += md_table(SPREAD_HEADERS, spread_rows(run))
    lines += ["", markdown(imbalance_text(run)), "", f"## {markdown(busiest_title(run))}", ""]
    busiest = render_markdown(run.busiest, width=width, color=color).splitlines()
    # The busiest process's report sits one heading level down.
    lines += ["#" + line if line.startswith("#") else line for line in busiest]
    return "\n".join(lines) + "\n"


def render_run_html(run: ProcessRun, where: str, *, width: int = 100, color: bool = False) -> str:
    from tpumem.report.html import SCHEMA, page, run_data
    from tpumem.report.run_json import run_dict

    body = run_dict(run, where)
    del body["busiest_report"]  # the page draws the busiest process from its run data
    body["rows"] = [list(row) for row in process_rows(run)]
    body["spread_rows"] = [list(row) for row in spread_rows(run)]
    body["summary"] = imbalance_text(run)
    body["busiest_title"] = busiest_title(run)
    body["lines"] = [
        {
            "name": p.name,
            "time_ns": list(p.line.time_ns),
            "step_position": list(p.line.step_position) if p.line.step_position else None,
            "in_use": list(p.line.in_use),
        }
        for p in run.processes
        if p.line is not None
    ]
    data = {
        "kind": "processes",
        "schema": SCHEMA,
        "processes": body,
        "runs": [run_data(run.busiest)],
    }
    return page(f"tpumem report · {_title(run, where)}", data)
