"""The HTML report: one self-contained page (no network fetch at all) whose
script draws every plot and table from the data embedded in it.

The data is the JSON report of each run (plus the comparison, for compare), so
the page shows the analysis' own figures and a test can read them back. Names
from traces (ops, files) only ever reach the page as text: the JSON is escaped
so no `</script>` can end its element, and the script inserts it with
textContent, never as markup.
"""

from __future__ import annotations

import dataclasses
import html
from importlib import resources
from typing import Any

from tpumem.analysis.accelerators import ACCELERATORS
from tpumem.analysis.comparison import Comparison
from tpumem.analysis.compiled.programs import CompiledProgram
from tpumem.analysis.difference import RunDiff
from tpumem.analysis.trace_figures import TraceAnalysis
from tpumem.report import HTML_SERIES_POINTS
from tpumem.report.answer_rows import answer
from tpumem.report.compare_json import comparison_data
from tpumem.report.fit_rows import (
    FIT_EXPLANATION,
    fit_answer,
    fit_capacity,
    fit_setting,
    fit_title,
    runs_fit_title,
)
from tpumem.report.json_report import SCHEMA, dump, live_groups_json, report_dict
from tpumem.report.page_words import PAGE_WORDS
from tpumem.report.rows import device_rows, fact_rows, failure_tables, headline_rows
from tpumem.report.tpu_tables import tpu_notes, tpu_title, tpu_verdict

MAX_GROUPS = 1000  # rows of the peak breakdown table per device
MAX_STACKS = 2000  # call stacks drawn in the flame graph per device; the rest as one
DATA_ID = "tpumem-data"
_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def _asset(name: str) -> str:
    asset = resources.files("tpumem.report").joinpath("assets").joinpath(name)
    return asset.read_text(encoding="utf-8")


def embed_json(data: Any) -> str:
    """JSON that is safe inside a <script> element."""
    text = dump(data, separators=(",", ":"))
    for raw, escaped in _ESCAPES.items():
        text = text.replace(raw, escaped)
    return text


def run_data(analysis: TraceAnalysis) -> dict[str, Any]:
    body = report_dict(analysis)
    # The run's rows in the text report's own words (how it ended, the capture,
    # what tpumem set, what the framework does not expose).
    body["headline"] = [list(row) for row in headline_rows(analysis)]
    body["facts"] = [list(row) for row in fact_rows(analysis)]
    body["answer"] = answer_data(analysis)
    body["failure_tables"] = [
        {"title": title, "groups": live_groups_json(groups)}
        for title, groups in failure_tables(analysis)
    ]
    for device, analysed in zip(body["devices"], analysis.devices, strict=True):
        device["figures"] = [list(row) for row in device_rows(analysed)]
    if analysis.fit is not None:
        # The fit table in the text report's words: the page draws, it does not word.
        body["fit"]["title"] = fit_title(analysis.fit.device)
        body["fit"]["explanation"] = FIT_EXPLANATION
        for row, advice in zip(body["fit"]["rows"], analysis.fit.rows, strict=True):
            row["answer"] = fit_answer(advice)
            row["setting_text"] = fit_setting(advice)
            row["capacity_text"] = fit_capacity(advice)
    for target, compiled in zip(body["tpu"], analysis.tpu, strict=True):
        target["title"] = tpu_title(compiled, limit=None)  # the page lists every program
        target["notes"] = tpu_notes(compiled)
        target["verdict_text"] = tpu_verdict(compiled)
    for device in body["devices"]:
        groups = device["peak"]["groups"]
        device["peak"]["groups_total"] = len(groups)
        device["peak"]["groups"] = groups[:MAX_GROUPS]
        device["peak"]["stacks"] = _fewer_stacks(device["peak"]["stacks"])
    return body


def answer_data(analysis: TraceAnalysis) -> dict[str, Any] | None:
    """The answer the page opens with, in the text report's words (answer_rows.py),
    each table with its rows' bytes to sort them by."""
    said = answer(analysis)
    if said is None:
        return None
    return {
        "headline": said.headline,
        "verdicts": list(said.verdicts),
        "tables": [
            {
                "title": t.title,
                "headers": list(t.headers),
                "rows": [list(r) for r in t.rows],
                "bytes": t.bytes,
            }
            for t in said.tables
        ],
        "notes": list(said.notes),
        "changes_title": said.changes_title,
        "changes": [list(c) for c in said.changes],
    }


def _fewer_stacks(stacks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The largest stacks, and the rest as one block: the graph keeps its total."""
    if len(stacks) <= MAX_STACKS:
        return stacks
    rest = stacks[MAX_STACKS - 1 :]
    frame = {"file": f"({len(rest):,} smaller stacks)", "line": 0, "function": ""}
    return [
        *stacks[: MAX_STACKS - 1],
        {
            "bytes": sum(s["bytes"] for s in rest),
            "buffers": sum(s["buffers"] for s in rest),
            "frames": [frame],
        },
    ]


def page(title: str, data: dict[str, Any]) -> str:
    data["accelerators"] = [dataclasses.asdict(a) for a in ACCELERATORS]
    data["words"] = PAGE_WORDS
    # (Runs side by side, unless their page named it; one run's is its own.)
    data.setdefault("fit_title", fit_title())
    data["accelerators_note"] = "Memory per chip, from: " + " · ".join(
        f"{a.name} {a.source}" for a in ACCELERATORS
    )
    data["limits"] = {"series_points": HTML_SERIES_POINTS, "max_groups": MAX_GROUPS}
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)}</title>\n<style>\n{_asset('report.css')}</style>\n"
        '</head>\n<body>\n<main id="app"><p>This report needs JavaScript.</p></main>\n'
        f'<script type="application/json" id="{DATA_ID}">{embed_json(data)}</script>\n'
        f"<script>\n{_asset('timeline.js')}</script>\n"
        f"<script>\n{_asset('report.js')}</script>\n</body>\n</html>\n"
    )


def render_html(
    analysis: TraceAnalysis, *, width: int = 100, color: bool = False, program: str | None = None
) -> str:
    """(Width and color are the terminal's: the page sets its own.) `program`: the
    compiled program the page opens on."""
    data = {"kind": "report", "schema": SCHEMA, "runs": [run_data(analysis)]}
    if program is not None:
        data["focus_program"] = program
    return page(f"tpumem report · {analysis.path or analysis.framework}", data)


def render_program_html(
    program: CompiledProgram,
    *,
    width: int = 100,
    color: bool = False,
    analysis: TraceAnalysis | None = None,
) -> str:
    """The run's page, opened on `program` (one of `analysis`'s)."""
    assert analysis is not None, "a program's page is its run's"
    return render_html(analysis, program=program.name)


def render_compare_html(comparison: Comparison, *, width: int = 100, color: bool = False) -> str:
    data = {
        "kind": "compare",
        "schema": SCHEMA,
        "comparison": comparison_data(comparison),
        "runs": [run_data(run) for run in comparison.runs],
        "fit_title": runs_fit_title([run.fit for run in comparison.runs]),
    }
    return page(f"tpumem compare · {' / '.join(comparison.names)}", data)


def render_diff_html(diff: RunDiff, *, width: int = 100, color: bool = False) -> str:
    from tpumem.report.diff_report import (
        device_title,
        diff_dict,
        figure_rows,
        frameworks_note,
        pair_note,
        process_rows,
    )

    body = diff_dict(diff)
    body["frameworks_note"] = frameworks_note(diff)
    if diff.processes:
        body["process_rows"] = [list(row) for row in process_rows(diff)]
        body["pair_note"] = pair_note(diff)
    for device, analysed in zip(body["devices"], diff.devices, strict=True):
        device["title"] = device_title(analysed)
        device["figure_rows"] = [list(row) for row in figure_rows(analysed)]
    data = {
        "kind": "diff",
        "schema": SCHEMA,
        "diff": body,
        "runs": [_drawn_only(run_data(diff.before)), _drawn_only(run_data(diff.after))],
    }
    return page(f"tpumem diff · {diff.before.path} → {diff.after.path}", data)


def _drawn_only(run: dict[str, Any]) -> dict[str, Any]:
    """A run as a diff's page draws it: its lines, not the explorable timeline
    (finer levels, moments, largest buffers), which only a run's own page has."""
    for device in run["devices"]:
        series = device.get("series")
        if series is not None:
            series.update(detail=[], moments=None, largest=None)
    return run
