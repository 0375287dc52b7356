"""The JSON report: every figure of the analysis under a versioned schema name.

Schema "tpumem-report/1" (documented in docs/figures.md, "JSON report"): the top level
holds the run (framework, backend, source, complete, duration_ns, total peak,
warnings, metadata) and `devices`, one object per device with `peak`,
`preallocation`, `fragmentation`, `waste` and `timeline`, each carrying its
`label` (measured / derived / modeled / not available). Bytes are integers,
times are nanoseconds from the trace's start.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from tpumem.analysis.summary import RunAnalysis

SCHEMA = "tpumem-report/1"


def report_dict(analysis: RunAnalysis) -> dict[str, Any]:
    body = dataclasses.asdict(analysis)
    for device in body["devices"]:
        peak = device["peak"]
        peak["label"] = device.pop("peak_label")
        peak["by_region"] = [{"region": r, "bytes": b} for r, b in peak["by_region"]]
        del peak["event_index"]
    return {"schema": SCHEMA, **body}


def finite(value: Any) -> Any:
    """`value` with every NaN or infinity as null: JSON has no such numbers, and
    strict parsers refuse Python's `NaN` and `Infinity`."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def dump(body: Any, **options: Any) -> str:
    """Strict JSON."""
    return json.dumps(finite(body), allow_nan=False, **options)


def render_json(analysis: RunAnalysis, *, width: int = 100, color: bool = False) -> str:
    """(Width and color are the terminal's: JSON has neither.)"""
    return dump(report_dict(analysis), indent=2) + "\n"
