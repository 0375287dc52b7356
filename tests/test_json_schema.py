"""The JSON report and comparison have their own schemas (tpumem/report/schemas/,
kept by hand: they are the reports' contract with other programs, and the reports
are written field by field to them); run_tpumem validates every one the suite writes
against them. Here: the schemas are valid JSON Schemas, the demo's reports keep to
them, a report that does not is caught, and the metadata's fields are the trace's."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jsonschema
import pytest

from conftest import SCHEMAS, assert_valid_json, run_tpumem, schema_registry
from tpumem.trace.metadata import EXTRA, EXTRAS, RunMetadata
from tpumem.trace.records import OTHER, hints

DEMO = Path(__file__).parent / "data" / "demo"


@pytest.mark.parametrize("name", ["report", "compare", "run", "diff"])
def test_the_schemas_are_json_schemas(name):
    schema = json.loads((SCHEMAS / f"tpumem-{name}-1.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$id"] == f"tpumem-{name}/1"


def test_the_demo_reports_keep_to_the_schema_and_a_changed_one_does_not():
    report = json.loads(gzip.decompress((DEMO / "tf_transformer.report.json.gz").read_bytes()))
    assert_valid_json("report", json.dumps(report))
    renamed = dict(report)
    renamed["peak_bytes"] = renamed.pop("total_peak_bytes")
    with pytest.raises(jsonschema.ValidationError):
        assert_valid_json("report", json.dumps(renamed))
    report["devices"][0]["peak"]["bytes"] = "57 MiB"
    with pytest.raises(jsonschema.ValidationError):
        assert_valid_json("report", json.dumps(report))


def test_a_comparison_keeps_to_its_schema(tmp_path):
    traces = []
    for run in ("jax_transformer", "torch_xla_transformer"):
        trace = tmp_path / f"{run}.tpumem"
        trace.write_bytes(gzip.decompress((DEMO / f"{run}.tpumem.gz").read_bytes()))
        traces.append(str(trace))
    result = run_tpumem("compare", *traces, "--format", "json")  # validated there too
    assert result.returncode == 0, result.stderr
    comparison = json.loads(result.stdout)
    assert comparison["schema"] == "tpumem-compare/1"
    # Each row is named by its key (and what it is of), not by its title's words.
    rows = comparison["rows"] + comparison["program_rows"]
    named = [(row["key"], row["about"]) for row in rows]
    assert len(set(named)) == len(named)
    peak = next(row for row in rows if row["key"] == "peak")
    assert peak["figure"] == "Peak in use" and peak["about"] is None


def test_a_comparisons_runs_are_held_to_the_reports_own_schema():
    """The comparison's schema refers to the report's for its runs (one schema
    for one report, no copy to drift): a run that breaks the report's schema
    breaks the comparison's, found through the reference."""
    report = json.loads(gzip.decompress((DEMO / "jax_transformer.report.json.gz").read_bytes()))
    compare = json.loads((SCHEMAS / "tpumem-compare-1.json").read_text())
    assert compare["properties"]["runs"]["items"] == {"$ref": "../tpumem-report/1"}
    validator = jsonschema.Draft202012Validator(compare, registry=schema_registry())

    def errors(run: dict) -> list:
        return list(validator.descend([run], compare["properties"]["runs"]))

    assert errors(report) == []
    report["devices"][0]["peak"]["bytes"] = "57 MiB"
    (error,) = errors(report)
    assert error.validator == "type" and error.instance == "57 MiB"


def test_the_metadata_in_the_schema_has_the_traces_fields():
    """A field the trace's metadata gains is described in the report's schema too
    (its type checked there), and one it loses leaves the schema."""
    fields = {name for name in hints(RunMetadata) if name not in (EXTRA, OTHER)}
    for extra in EXTRAS.values():
        fields |= set(hints(extra))
    schema = json.loads((SCHEMAS / "tpumem-report-1.json").read_text())
    assert set(schema["properties"]["metadata"]["properties"]) == fields


def test_a_wrongly_typed_metadata_field_is_caught():
    report = json.loads(gzip.decompress((DEMO / "jax_transformer.report.json.gz").read_bytes()))
    report["metadata"]["buffer_book"]["arrays_entered"] = "many"
    with pytest.raises(jsonschema.ValidationError):
        assert_valid_json("report", json.dumps(report))
