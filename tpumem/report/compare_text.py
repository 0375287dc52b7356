"""`tpumem compare` in the terminal: one column per run, the best of each row
marked, ratios against the first run, then where the peaks differ and the fit.

Each column is headed by the run's name alone (a legend under the table gives
its device and file). A table still wider than the terminal changes shape
rather than wrap its words: one block per run, its figures as rows."""

from __future__ import annotations

from pathlib import Path

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tpumem.analysis import provenance
from tpumem.analysis.advisor import FitRow
from tpumem.analysis.comparison import CompareRow, Comparison
from tpumem.analysis.compiled import step_programs
from tpumem.analysis.figures import BYTES, COUNT, RATE
from tpumem.report.compare_words import row_title
from tpumem.report.escapes import markup
from tpumem.report.figure_values import format_value
from tpumem.report.fit_rows import fit_answer, fit_note, runs_fit_title
from tpumem.report.kind_words import KIND_WORDS, difference_sentence
from tpumem.report.text import string_console
from tpumem.units import format_bytes

# How each figure was obtained, shortened to fit under a value.
_TAGS = {
    "measured": "measured",
    "derived": "derived",
    "modeled": "modeled",
    "estimated": "estimated",
    "not available": "",
    provenance.COMPILE_TIME: "compile-time",
    provenance.INCLUDED: "included (TPU run)",
    step_programs.RUNNING_AT_PEAK: "running at the peak",
    step_programs.LARGEST_PLAN: "the largest plan",
    step_programs.XLA_TPU: "XLA:TPU",
}


def _cell(row: CompareRow, index: int) -> str:
    # (a text row's value is the trace's, a framework's name as its recording wrote
    # it: shown escaped, as every name from a trace is, and never taken as markup)
    text = markup(format_value(row.unit, row.values[index]))
    if row.best == index:
        text = f"[bold green]{text} *[/]"
    notes = []
    tag = _TAGS.get(row.labels[index], row.labels[index])
    if tag and row.values[index] is not None:
        notes.append(markup(tag))
    ratio = row.ratios[index]
    if index and ratio is not None and row.unit in (BYTES, COUNT, RATE):
        notes.append(f"x{ratio:.2f}")
    return text + (f"\n[dim]{', '.join(notes)}[/]" if notes else "")


def _signed(value: int) -> str:
    return ("+" if value > 0 else "") + format_bytes(value) if value else "="


def render_compare_text(comparison: Comparison, *, width: int = 100, color: bool = False) -> str:
    console, buffer = string_console(width, color)
    names = comparison.names
    console.print(f"[bold]tpumem compare[/] · {len(names)} runs")
    _print_fitted(console, _rows_table(comparison, comparison.rows), comparison)
    for name, run, device in zip(names, comparison.runs, comparison.devices, strict=True):
        file = Path(run.path).name if run.path else "-"
        console.print(f"[dim]{markup(name)}: {markup(device or '-')} of {markup(file)}[/]")
    console.print(
        "[dim]* lowest in its row · xN: against the first run · under each value: how it "
        "was obtained[/]"
    )
    _differences(console, comparison)
    if comparison.program_rows:
        table = _rows_table(comparison, comparison.program_rows, title=PROGRAMS_TITLE)
        _print_fitted(console, table, comparison)
    _fit(console, comparison)
    return buffer.getvalue()


def _print_fitted(
    console: Console, table: Table, comparison: Comparison, titled: bool = True
) -> None:
    """The table as it is where it fits the terminal; else one block per run (its
    name, then each row's figure and value; `titled` False: a table of a column
    per run and no figure's): a column too narrow for its words would wrap
    every cell."""
    least, most = _widths(table)
    room = console.width - (3 * len(least) + 1) - sum(least)  # (the box: 3 a column, 1)
    if room >= 0:
        # Each column its longest word, and of what is left a share in proportion
        # to how much wider its lines are (rich's own sharing cuts words).
        wanted = [m - w for m, w in zip(most, least, strict=True)]
        share = min(1.0, room / sum(wanted)) if sum(wanted) else 0.0
        for column, word, more in zip(table.columns, least, wanted, strict=True):
            column.width = word + int(more * share)
        console.print(table)
        return
    if table.title:
        console.print(table.title)
    first = 1 if titled else 0
    titles = [str(cell) for cell in table.columns[0].cells] if titled else None
    for index, name in enumerate(comparison.names):
        block = Table(show_header=False, box=None, pad_edge=False, title_justify="left")
        block.title = f"[bold]{markup(name)}[/]"
        cells = [str(cell) for cell in table.columns[index + first].cells]
        if titles is None:
            block.add_column()
            for cell in cells:
                block.add_row(cell)
        else:
            block.add_column(style="bold", no_wrap=True, min_width=max(map(cell_len, titles)))
            block.add_column(overflow="fold")
            block.add_column(overflow="fold")  # (a setting is one word: folded, never cut)
            for title, cell in zip(titles, cells, strict=True):
                value, _, how = cell.partition("\n")
                block.add_row(title, value, how)
        console.print(block)


PROGRAMS_TITLE = "The training step's compiled program, side by side"


def _widths(table: Table) -> tuple[list[int], list[int]]:
    """Each column's narrowest without breaking a word (its longest word; a label
    column that keeps its line: its longest line), and its natural width (its
    longest line)."""
    least, most = [], []
    for column in table.columns:
        texts = [Text.from_markup(str(cell)).plain for cell in (column.header, *column.cells)]
        lines = [cell_len(line) for text in texts for line in text.splitlines()] or [0]
        words = [cell_len(word) for text in texts for word in text.split()] or [0]
        least.append(max(lines) if column.no_wrap else max(words))
        most.append(max(lines))
    return least, most


def _rows_table(
    comparison: Comparison, rows: tuple[CompareRow, ...], title: str | None = None
) -> Table:
    table = Table(show_lines=False, title=title, title_justify="left")
    table.add_column("figure", style="bold", no_wrap=True)
    for name in comparison.names:
        table.add_column(markup(name))
    for row in rows:
        table.add_row(row_title(row), *(_cell(row, i) for i in range(len(comparison.names))))
    return table


def _differences(console: Console, comparison: Comparison) -> None:
    names = comparison.names
    if len(names) < 2 or not comparison.kinds:
        return
    table = Table(
        title="Where the peaks differ: each peak by kind, as each run's report gives it",
        title_justify="left",
    )
    table.add_column("kind")
    for index, name in enumerate(names):
        title = markup(name) if index == 0 else f"{markup(name)}\n[dim]vs {markup(names[0])}[/]"
        table.add_column(title, justify="right")
    for kind in comparison.kinds:
        cells = [format_bytes(kind.bytes[0])]
        cells += [
            f"{format_bytes(b)}\n[dim]{_signed(c)}[/]"
            for b, c in zip(kind.bytes[1:], kind.change[1:], strict=True)
        ]
        table.add_row(KIND_WORDS[kind.kind], *cells)
    _print_fitted(console, table, comparison)
    sentence = difference_sentence(comparison)
    if sentence:
        console.print(markup(sentence + "."))
    ops = Table(
        title=f"Largest ops at each peak (top {len(comparison.top_ops[0]) or 0})",
        title_justify="left",
    )
    for name in names:
        ops.add_column(markup(name))
    depth = max((len(top) for top in comparison.top_ops), default=0)
    for line in range(depth):
        ops.add_row(
            *(
                f"{format_bytes(top[line][1])} {markup(top[line][0])}" if line < len(top) else ""
                for top in comparison.top_ops
            )
        )
    if depth:
        _print_fitted(console, ops, comparison, titled=False)


def _fit(console: Console, comparison: Comparison) -> None:
    advice = [run.fit for run in comparison.runs]
    if not any(advice):
        return
    table = Table(
        title=runs_fit_title(advice),
        title_justify="left",
    )
    table.add_column("accelerator")
    for name in comparison.names:
        table.add_column(markup(name), overflow="fold")
    first = next(a for a in advice if a)
    for index, target in enumerate(first.rows):
        label = f"{target.accelerator} [dim]{format_bytes(target.memory_bytes)}[/]"
        table.add_row(label, *(_fit_cell(a.rows[index]) if a else "-" for a in advice))
    _print_fitted(console, table, comparison)
    for name, fit in zip(comparison.names, advice, strict=True):
        for note in map(fit_note, fit.notes if fit else ()):
            console.print(f"[dim]{markup(name)}: {markup(note)}[/]")


def _fit_cell(row: FitRow) -> str:
    answer = fit_answer(row) if row.fits else f"[red]{fit_answer(row)}[/]"
    return answer + (f"\n[dim]{row.setting}[/]" if row.setting else "")
