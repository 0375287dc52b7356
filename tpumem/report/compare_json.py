"""`tpumem compare --format json`: the comparison ("tpumem-compare/1") with each
run's whole JSON report ("tpumem-report/1") under `runs`, as `tpumem report
--format json` gives it."""

from __future__ import annotations

import json

from tpumem.analysis.comparison import Comparison
from tpumem.report.html import comparison_data
from tpumem.report.json_report import report_dict


def render_compare_json(comparison: Comparison) -> str:
    body = comparison_data(comparison)
    body["runs"] = [report_dict(run) for run in comparison.runs]
    for run in body["runs"]:
        for device in run["devices"]:
            device["series"] = None  # drawing only (--html): not a figure
    return json.dumps(body, indent=2) + "\n"
