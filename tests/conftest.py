from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cli_forks import close_servers, run_tpumem_process
from lanes import LaneGuard, mark_lanes
from tpumem.trace.writer import TraceWriter

# The lanes (unit, cli, slow, frameworks): decided and enforced in lanes.py, one guard
# per process (an xdist worker runs one test at a time).
_lane_guard: LaneGuard | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _lane_guard
    _lane_guard = LaneGuard()
    # XLA:TPU's budget per chip is cached between runs (tpu/budget_cache.py): one
    # cache for the suite's run, shared by its workers, none of the user's.
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"
    cache = Path(tempfile.gettempdir()) / f"tpumem-test-cache-{run}"
    os.environ["XDG_CACHE_HOME"] = str(cache)


def pytest_unconfigure(config: pytest.Config) -> None:
    close_servers()
    if _lane_guard is not None:
        _lane_guard.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_lanes(items)


# The guard starts before the test's fixtures (a module's fixture runs in its first
# test's setup), checks after its call and again after its teardown.
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Any:
    assert _lane_guard is not None
    _lane_guard.start(item)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    assert _lane_guard is not None
    try:
        return (yield)
    finally:
        _lane_guard.check()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item) -> Any:
    assert _lane_guard is not None
    try:
        result = yield
        _lane_guard.check()
        return result
    finally:
        _lane_guard.stop()


def run_tpumem(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m tpumem ARGS` in its own process, as a user would run it (forked
    from a process that imported tpumem already: cli_forks.py). Every JSON report
    and comparison it prints is checked against its JSON Schema."""
    result = run_tpumem_process(list(args), cwd, timeout=300)
    assert_written_json_valid(result, list(args), cwd)
    return result


def assert_written_json_valid(
    result: subprocess.CompletedProcess[str], args: list[str], cwd: Path | None
) -> None:
    """The JSON report, comparison or diff that `tpumem ARGS` wrote (if it wrote
    one) keeps to its JSON Schema; and the report `profile -f json` printed after
    the run, on standard error (its standard output is the script's)."""
    if result.returncode == 0 and args[:1] in (["report"], ["compare"], ["diff"]):
        written = _json_written(args, cwd, result.stdout)
        if written is not None:
            assert_valid_json(written, args[0])
    if args[:1] == ["profile"] and _option(args, "-f", "--format") == "json":
        assert_valid_json(json.dumps(printed_report(result.stderr)), "profile")


def printed_report(stderr: str) -> Any:
    """The JSON report `profile -f json` printed on standard error, between the
    script's own lines and tpumem's last ones."""
    start = stderr.rfind('{\n  "schema": ')
    assert start >= 0, f"no JSON report in: {stderr[-2000:]}"
    document, _ = json.JSONDecoder().raw_decode(stderr, start)
    return document


SCHEMAS = Path(__file__).resolve().parent.parent / "tpumem" / "report" / "schemas"


def _option(args: list[str], *names: str) -> str | None:
    return next((args[i + 1] for i, a in enumerate(args[:-1]) if a in names), None)


def _json_written(args: list[str], cwd: Path | None, stdout: str) -> str | None:
    """The JSON a report or compare command wrote: on stdout, or to its -o file."""
    fmt, output = _option(args, "-f", "--format"), _option(args, "-o", "--output")
    if output is None or output == "-":  # (`-o -`: standard output)
        return stdout if fmt == "json" else None
    if fmt == "json" or (fmt is None and output.endswith(".json")):
        return (Path(cwd or ".") / output).read_text()
    return None


# The schemas each command's JSON may name.
WRITES = {
    "report": ("tpumem-report/1", "tpumem-program/1", "tpumem-run/2"),
    "profile": ("tpumem-report/1", "tpumem-run/2"),
    "compare": ("tpumem-compare/1",),
    "diff": ("tpumem-diff/2",),
}


def assert_valid_json(text: str, command: str | None = None) -> None:
    """`text` keeps to the schema its own `schema` names (a report, one of its
    programs, a distributed run's report, a comparison, a diff), one that
    `command` writes."""
    document = json.loads(text)
    assert isinstance(document, dict) and "schema" in document, text[:200]
    if command is not None:
        assert document["schema"] in WRITES[command], (command, document["schema"])
    _validate(document["schema"], document)


def _validate(schema_id: str, document: Any) -> None:
    """As jsonschema.validate: the best match among the errors, raised."""
    from jsonschema.exceptions import best_match

    error = best_match(_validator(schema_id).iter_errors(document))
    if error is not None:
        raise error


@functools.cache
def _validator(schema_id: str) -> Any:
    """The validator of the published schema of that id. Its schema is checked
    once: jsonschema.validate checks it against JSON Schema's own at every call,
    0.1-0.2 s each, a fifth of the cli lane."""
    import jsonschema

    from tpumem.report.schema_files import file_name

    schema = json.loads((SCHEMAS / file_name(schema_id)).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema, registry=schema_registry())


def schema_registry() -> Any:
    """The published schemas by their ids: a comparison's runs and a distributed
    run's busiest process refer to the report's schema ("../tpumem-report/1")."""
    from referencing import Registry, Resource

    documents = [json.loads(path.read_text()) for path in sorted(SCHEMAS.glob("*.json"))]
    return Registry().with_resources(
        (document["$id"], Resource.from_contents(document)) for document in documents
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit status 2 and one line on stderr, holding `words`; the line."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tpumem: error: ")
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def run_python(
    script: str, cwd: Path, env: dict[str, str] | None = None, args: list[str] | None = None
) -> Any:
    """Runs a framework script in a fresh interpreter; its last stdout line is JSON."""
    path = cwd / "script.py"
    path.write_text(script)
    result = subprocess.run(
        [sys.executable, str(path), *(args or [])],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})},
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture
def make_trace(tmp_path: Path) -> Callable[..., Path]:
    """Writes a trace from row dicts: make_trace([{"kind": "alloc", ...}, ...])."""

    def make(rows: list[dict], metadata: dict | None = None, name: str = "t.tpumem") -> Path:
        path = tmp_path / name
        with TraceWriter(path, {"framework": "test", **(metadata or {})}) as writer:
            for row in rows:
                row = dict(row)
                writer.record(row.pop("kind"), **row)
        return path

    return make
