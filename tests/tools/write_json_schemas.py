"""Writes the JSON Schemas of the JSON report (`tpumem-report/1`) and of the
comparison (`tpumem-compare/1`) into tpumem/report/schemas/, from the types of the
analysis they are written from. Run it when a field is added (the schema's version
stays: fields are added, never renamed or removed, within a version); a field
renamed or removed is a new version. tests/test_json_schema.py validates every
report and comparison the suite writes against the files.

    .venv/bin/python tests/tools/write_json_schemas.py
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from pathlib import Path
from typing import Any

from tpumem.analysis.comparison import CompareRow, RegionDifference
from tpumem.analysis.summary import DeviceAnalysis, RunAnalysis
from tpumem.report.compare_json import COMPARE_SCHEMA
from tpumem.report.json_report import SCHEMA

TARGET = Path(__file__).resolve().parents[2] / "tpumem" / "report" / "schemas"
DRAFT = "https://json-schema.org/draft/2020-12/schema"


def of_type(hint: Any) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if hint is Any:
        return {}
    if hint is type(None):
        return {"type": "null"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint is str:
        return {"type": "string"}
    if origin in (types.UnionType, typing.Union):
        return {"anyOf": [of_type(arg) for arg in typing.get_args(hint)]}
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": of_type(args[0])}
        return {"type": "array", "prefixItems": [of_type(a) for a in args], "items": False}
    if origin is dict:
        return {"type": "object", "additionalProperties": of_type(typing.get_args(hint)[1])}
    if dataclasses.is_dataclass(hint):
        return of_class(hint)
    raise TypeError(f"no JSON type for {hint!r}")


def of_class(cls: type, drop: tuple[str, ...] = ()) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in drop]
    return {
        "type": "object",
        "properties": {name: of_type(hints[name]) for name in names},
        "required": names,
        "additionalProperties": False,
    }


def report_schema() -> dict[str, Any]:
    """What json_report.report_dict makes of a RunAnalysis."""
    run = of_class(RunAnalysis)
    device = of_class(DeviceAnalysis, drop=("peak_label",))
    peak = device["properties"]["peak"]
    peak["properties"].pop("event_index")
    peak["required"].remove("event_index")
    peak["properties"]["label"] = {"type": "string"}
    peak["required"].append("label")
    peak["properties"]["by_region"] = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"region": {"type": "string"}, "bytes": {"type": "integer"}},
            "required": ["region", "bytes"],
            "additionalProperties": False,
        },
    }
    run["properties"]["devices"] = {"type": "array", "items": device}
    run["properties"]["metadata"] = {
        "type": "object",
        "description": "the trace's metadata; tpumem/trace/records.py describes what is read",
    }
    run["properties"] = {"schema": {"const": SCHEMA}, **run["properties"]}
    run["required"] = ["schema", *run["required"]]
    return {"$schema": DRAFT, "$id": SCHEMA, "title": "tpumem report", **run}


def compare_schema(report: dict[str, Any]) -> dict[str, Any]:
    """What compare_json.render_compare_json writes."""
    run = {k: v for k, v in report.items() if not k.startswith("$") and k != "title"}
    properties = {
        "schema": {"const": COMPARE_SCHEMA},
        "names": {"type": "array", "items": {"type": "string"}},
        "devices": {"type": "array", "items": {"type": ["string", "null"]}},
        "alignment": {"type": "string"},
        "rows": {"type": "array", "items": of_class(CompareRow)},
        "regions": {"type": "array", "items": of_class(RegionDifference)},
        "top_ops": {
            "type": "array",
            "items": {
                "type": "array",
                "items": {
                    "type": "array",
                    "prefixItems": [{"type": "string"}, {"type": "integer"}],
                    "items": False,
                },
            },
        },
        "runs": {"type": "array", "items": run},
    }
    return {
        "$schema": DRAFT,
        "$id": COMPARE_SCHEMA,
        "title": "tpumem comparison",
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def main() -> None:
    TARGET.mkdir(exist_ok=True)
    report = report_schema()
    for name, schema in (("report", report), ("compare", compare_schema(report))):
        path = TARGET / f"tpumem-{name}-1.json"
        path.write_text(json.dumps(schema, indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
