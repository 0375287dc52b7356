"""Every JSON tpumem writes has its schema (tpumem/report/schemas/), generated from
the shapes that write it (report/json_shapes.py); run_tpumem validates every one
the suite writes against them. Here: the files are what the shapes generate, they
are valid JSON Schemas, each command's JSON keeps to its own, a report that does
not is caught, the figures are declared whole, and the metadata's fields are the
trace's."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jsonschema
import pytest

from conftest import SCHEMAS, assert_valid_json, run_tpumem, schema_registry
from tpumem.analysis.comparison import COMPARED, ROWS
from tpumem.analysis.difference import FIGURES as DIFFERED
from tpumem.analysis.figures import BYTES, COUNT, FIGURES, RATE, SHARE, TEXT, TIME
from tpumem.report.diff_report import DIFF_SCHEMA
from tpumem.report.schema_files import SUPERSEDED, file_name, generated, text
from tpumem.trace.metadata import EXTRA, EXTRAS, TraceMetadata
from tpumem.trace.records import OTHER, hints

DEMO = Path(__file__).parent.parent / "data" / "demo"
UNITS = (BYTES, COUNT, SHARE, RATE, TIME, TEXT)


def _resolved(schema: dict, node: dict) -> dict:
    """A schema node with its `$defs` reference and its null alternative left out."""
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].split("/")[-1]]
    alternatives = [n for n in node.get("anyOf", ()) if n != {"type": "null"}]
    return _resolved(schema, alternatives[0]) if len(alternatives) == 1 else node


def test_the_schema_files_are_what_the_shapes_generate():
    """A key added to a JSON's shape, or a type changed, changes its schema: the
    files are written again (python -m tpumem.report.schema_files), never edited."""
    documents = generated()
    published = sorted(path.name for path in SCHEMAS.glob("*.json"))
    assert published == sorted([*documents, *SUPERSEDED])
    for name, schema in documents.items():
        assert (SCHEMAS / name).read_text() == text(schema), f"{name}: run schema_files"


@pytest.mark.parametrize("name", sorted([*generated(), *SUPERSEDED]))
def test_the_schemas_are_json_schemas(name):
    schema = json.loads((SCHEMAS / name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert file_name(schema["$id"]) == name


def test_every_json_a_command_writes_keeps_to_its_schema(tmp_path):
    """Each command that writes JSON, run as a user runs it: its JSON names its
    schema, keeps to it, and every published schema is one some command writes."""
    traces = []
    for run in ("jax_transformer", "torch_xla_transformer"):
        trace = tmp_path / f"{run}.tpumem"
        trace.write_bytes(gzip.decompress((DEMO / f"{run}.tpumem.gz").read_bytes()))
        traces.append(str(trace))
    run = str(Path(__file__).parent.parent / "data" / "gpu" / "run")
    commands = [
        ("report", traces[0], "-f", "json"),
        ("report", traces[0], "--program", "jit_step", "-f", "json"),
        ("report", run, "-f", "json"),
        ("report", traces[1], "-o", str(tmp_path / "written.json")),
        ("compare", *traces, "-f", "json"),
        ("diff", *traces, "-f", "json"),
        ("diff", run, run, "-f", "json"),
    ]
    written = set()
    for command in commands:
        result = run_tpumem(*command)
        assert result.returncode == 0, result.stderr
        output = tmp_path / "written.json" if "-o" in command else None
        document = json.loads(output.read_text() if output else result.stdout)
        assert_valid_json(json.dumps(document), command[0])
        written.add(document["schema"])
    assert {file_name(schema) for schema in written} == set(generated())


def test_each_figure_is_declared_whole():
    """A figure the report, comparison, diff and a run's spread show has a key, a
    title and a unit, and the field it reads is in the report's schema; the keys
    and titles are distinct, and a diff's and a comparison's JSON name it by key."""
    report = json.loads((SCHEMAS / "tpumem-report-1.json").read_text())
    diff = json.loads((SCHEMAS / file_name(DIFF_SCHEMA)).read_text())
    device = report["properties"]["devices"]["items"]["properties"]
    assert len({f.key for f in FIGURES}) == len({f.title for f in FIGURES}) == len(FIGURES)
    for figure in FIGURES:
        assert figure.key and figure.title and figure.short and figure.unit in UNITS
        node = {"properties": device}
        for part in figure.field.split("."):
            node = node["properties"][part]
            node = _resolved(report, node)
        assert node, figure.field
    shown = diff["properties"]["devices"]["items"]["properties"]["figures"]["properties"]
    assert list(shown) == [f.key for f in DIFFERED]
    assert {f.key for f in COMPARED} <= {key for key, _ in ROWS}


def test_the_demo_reports_keep_to_the_schema_and_a_changed_one_does_not():
    report = json.loads(gzip.decompress((DEMO / "tf_transformer.report.json.gz").read_bytes()))
    assert_valid_json(json.dumps(report))
    renamed = dict(report)
    renamed["peak_bytes"] = renamed.pop("total_peak_bytes")
    with pytest.raises(jsonschema.ValidationError):
        assert_valid_json(json.dumps(renamed))
    report["devices"][0]["peak"]["bytes"] = "57 MiB"
    with pytest.raises(jsonschema.ValidationError):
        assert_valid_json(json.dumps(report))


def test_a_comparison_keeps_to_its_schema(tmp_path):
    traces = []
    for run in ("jax_transformer", "torch_xla_transformer", "torch_transformer"):
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
    fields = {name for name in hints(TraceMetadata) if name not in (EXTRA, OTHER)}
    for extra in EXTRAS.values():
        fields |= set(hints(extra))
    schema = json.loads((SCHEMAS / "tpumem-report-1.json").read_text())
    assert set(schema["properties"]["metadata"]["properties"]) == fields


def test_a_wrongly_typed_metadata_field_is_caught():
    report = json.loads(gzip.decompress((DEMO / "jax_transformer.report.json.gz").read_bytes()))
    report["metadata"]["buffer_book"]["arrays_entered"] = "many"
    with pytest.raises(jsonschema.ValidationError):
        assert_valid_json(json.dumps(report))
