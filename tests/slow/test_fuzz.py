"""Whatever a trace or a profile holds, tpumem ends in a valid report or one line
and exit status 2: never a traceback, a crash or a hang. Seeded mutants of real
traces (JAX on an H100) and real XSpace profiles (TensorFlow and JAX on this CPU),
and hand-built hostile traces, each through the CLI's entry point
(tests/fuzzing.py). tests/tools/fuzz_campaign.py runs the long campaign."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_tpumem
from fuzzing import Campaign, write_mutants
from hostile_traces import cases, write
from tpumem.trace.reader import CHUNK_ROWS, load
from tpumem.trace.writer import TraceWriter

DATA = Path(__file__).parent.parent / "data"
TRACES = sorted((DATA / "gpu").glob("*.tpumem"))
PROFILES = sorted((DATA / "xplane").glob("*.xplane.pb"))
MUTANTS_PER_FILE = 60


def _judge(jobs):
    outcomes = Campaign().run(jobs)
    assert len(outcomes) == len(jobs)
    failures = [o for o in outcomes if o.verdict not in ("report", "refused")]
    assert not failures, "\n\n".join(f"{f.verdict}: {f.how}\n{f.detail}" for f in failures[:5])
    return outcomes


def test_mutated_traces_end_in_a_report_or_one_line(tmp_path):
    mutants = write_mutants(TRACES, tmp_path, MUTANTS_PER_FILE, seed=15)
    formats = ("json", "text", "md", "html")
    jobs = [
        (str(path), how, ["report", str(path), "-f", formats[i % 4]])
        for i, (path, how, _) in enumerate(mutants)
    ]
    outcomes = _judge(jobs)
    # Both ends are exercised: mutants that still load and ones refused.
    verdicts = {o.verdict for o in outcomes}
    assert verdicts == {"report", "refused"}


def test_mutated_profiles_import_or_are_refused_in_one_line(tmp_path):
    assert len(PROFILES) == 2
    mutants = write_mutants(PROFILES, tmp_path / "in", MUTANTS_PER_FILE, seed=15)
    jobs = []
    for index, (path, how, _) in enumerate(mutants):
        out = tmp_path / f"imported-{index}.tpumem"
        jobs.append((str(path), how, ["import", str(path), "-o", str(out)]))
        jobs.append((str(path), how, ["report", str(out), "-f", "json"]))
    _judge(jobs)
    assert any(p.name.startswith("imported-") for p in tmp_path.iterdir())


def test_hand_built_hostile_traces(tmp_path):
    jobs = []
    for number, (name, make) in enumerate(cases().items()):
        path = make(tmp_path / f"hostile-{number}.tpumem")
        jobs += [(str(path), name, ["report", str(path), "-f", f]) for f in ("json", "text", "md")]
    _judge(jobs)


def test_terminal_escapes_from_a_trace_are_shown_escaped(tmp_path):
    path = cases()["escapes everywhere"](tmp_path / "escapes.tpumem")
    for fmt in ("text", "md"):
        result = run_tpumem("report", str(path), "-f", fmt)
        assert result.returncode == 0, result.stderr
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout
        assert "\x9b" not in result.stdout
        assert "x1b]0;pwned" in result.stdout  # markdown escapes the backslash too
    text = run_tpumem("report", str(path)).stdout
    assert "[bold red]markup[/]" in text  # shown as written, not taken as markup


def test_json_reports_are_strict_json(tmp_path):
    path = cases()["fragmentation infinite"](tmp_path / "inf.tpumem")
    result = run_tpumem("report", str(path), "-f", "json")
    assert result.returncode == 0, result.stderr
    assert "Infinity" not in result.stdout and "NaN" not in result.stdout
    report = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(c))
    assert any("out of any device's range" in w for w in report["warnings"])


def test_a_damaged_batch_keeps_the_batches_before_it(tmp_path):
    """A dictionary whose string offsets point past its buffer (pyarrow would read
    out of bounds): the batch before it loads, the rest is named as damaged."""
    path = tmp_path / "damaged.tpumem"
    with TraceWriter(path, {"framework": "jax"}, flush_interval_s=0) as writer:
        writer.alloc(time_ns=1, device="GPU:0", buffer_id=1, bytes=64, op="first")
        writer.flush()
        writer.alloc(time_ns=2, device="GPU:0", buffer_id=2, bytes=64, op="dot")
    data = path.read_bytes()
    at = data.index(b"\x00\x00\x00\x00\x03\x00\x00\x00dot")  # the offsets of ["dot"]
    path.write_bytes(data[: at + 4] + (1 << 30).to_bytes(4, "little") + data[at + 8 :])
    trace = load(path)
    assert trace.table.column("op").to_pylist() == ["first"]
    assert any("damaged after its first 1 rows" in w for w in trace.warnings)


@pytest.mark.parametrize("version", ["1", 0, -1, True, None, 1.0])
def test_format_versions_that_are_not_positive_integers_are_refused(tmp_path, version):
    header = {"format": "tpumem-trace", "format_version": version}
    result = run_tpumem("report", str(write(tmp_path / "v.tpumem", header=header)))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"tpumem: error: {tmp_path / 'v.tpumem'}: the trace's format version "
        f"{version!r} is not one tpumem knows"
    )


def test_many_small_batches_load_as_few_chunks(tmp_path):
    """A long run's writer flushes ten batches a second; the reader joins them, so
    the analysis works on chunks of CHUNK_ROWS rows, not on every batch."""
    path = tmp_path / "long.tpumem"
    batches = 3000
    with TraceWriter(path, {"framework": "jax"}, flush_interval_s=0) as writer:
        for i in range(batches):
            writer.alloc(time_ns=2 * i, device="GPU:0", buffer_id=i, bytes=256, op=f"op{i % 7}")
            writer.free(time_ns=2 * i + 1, device="GPU:0", buffer_id=i, bytes=256)
            writer.flush()
    trace = load(path)
    assert len(trace) == 2 * batches
    assert trace.table.column("op").num_chunks <= 2 * batches // CHUNK_ROWS + 3
    assert sorted(set(trace.table.column("op").to_pylist()) - {None}) == [
        f"op{i}" for i in range(7)
    ]


def test_mutated_run_directories_end_in_a_report_or_one_line(tmp_path):
    """A distributed run's directory with one process's trace mutated: the run's
    report in each format, and compare of the run against a trace."""
    sources = sorted((DATA / "gpu" / "run").glob("*.tpumem"))
    mutants = write_mutants(sources[:1], tmp_path / "mutants", 24, seed=47)
    jobs = []
    for index, (mutant, how, _) in enumerate(mutants):
        run = tmp_path / f"run-{index}"
        run.mkdir()
        for source in sources[1:]:
            (run / source.name).write_bytes(source.read_bytes())
        mutant.rename(run / sources[0].name)
        jobs.append((str(run), how, ["report", str(run), "-f", ("json", "text", "md")[index % 3]]))
        jobs.append((str(run), how, ["compare", str(run), str(TRACES[0]), "-f", "json"]))
    _judge(jobs)


def test_mutated_program_rows_end_in_a_report_or_one_line(tmp_path):
    """A trace whose compiled program (an HloProto in a row of its own) is mutated:
    the report in each format, and the program's own report."""
    from fuzzing import mutants as mutated
    from hostile_traces import _hlo_row, _hostile_program, _rows
    from tpumem.trace.hlo_rows import hlo_row_text

    jobs = []
    for index, (how, data) in enumerate(mutated(_hostile_program(), 40, seed=47)):
        path = write(
            tmp_path / f"program-{index}.tpumem", [*_rows(), _hlo_row(hlo_row_text("m", data, 3))]
        )
        fmt = ("json", "text", "md", "html")[index % 4]
        jobs.append((str(path), how, ["report", str(path), "-f", fmt]))
        jobs.append((str(path), how, ["report", str(path), "--program", "handmade", "-f", fmt]))
    outcomes = _judge(jobs)
    assert {o.verdict for o in outcomes} == {"report", "refused"}
