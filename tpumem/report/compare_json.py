"""`tpumem compare --format json`: the comparison ("tpumem-compare/1",
tpumem/report/schemas/tpumem-compare-1.json) with each run's whole JSON report
("tpumem-report/1") under `runs`, as `tpumem report --format json` gives it. Every
field is named here, as in json_report.py."""

from __future__ import annotations

from typing import Any

from tpumem.analysis.comparison import CompareRow, Comparison
from tpumem.report.compare_words import row_title
from tpumem.report.json_report import dump, report_dict
from tpumem.report.kind_words import difference_sentence

COMPARE_SCHEMA = "tpumem-compare/1"


def comparison_data(comparison: Comparison) -> dict[str, Any]:
    return {
        "schema": COMPARE_SCHEMA,
        "names": list(comparison.names),
        "devices": list(comparison.devices),
        "alignment": comparison.alignment,
        "rows": [_row(row) for row in comparison.rows],
        "program_rows": [_row(row) for row in comparison.program_rows],
        "kinds": [
            {"kind": kind.kind, "bytes": list(kind.bytes), "change": list(kind.change)}
            for kind in comparison.kinds
        ],
        "difference": difference_sentence(comparison),
        "top_ops": [[list(op) for op in top] for top in comparison.top_ops],
    }


def _row(row: CompareRow) -> dict[str, Any]:
    # `key` and `about` name the row for programs (its title is for people, and
    # its words may change); `figure` is the title the text and the page show.
    return {
        "key": row.key,
        "about": row.about,
        "figure": row_title(row),
        "unit": row.unit,
        "values": list(row.values),
        "labels": list(row.labels),
        "best": row.best,
        "ratios": list(row.ratios),
    }


def render_compare_json(comparison: Comparison, *, width: int = 100, color: bool = False) -> str:
    """(Width and color are the terminal's: JSON has neither.)"""
    body = comparison_data(comparison)
    body["runs"] = [report_dict(run) for run in comparison.runs]
    for run in body["runs"]:
        for device in run["devices"]:
            device["series"] = None  # drawing only (--html): not a figure
    return dump(body, indent=2) + "\n"
