"""The summary a recording leaves beside its trace, and a run read from them: the
figures equal the trace's own, field by field; a summary that no longer stands
for its trace (changed, newer, damaged, missing) is not used, the trace is read
and the run says why; and what a summary answers is answered without the trace."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from run_summaries import LEAK, assert_summaries_stand_for_the_traces, bare_copy, ranked_trace

import tpumem
from conftest import run_tpumem
from tpumem.analysis.processes import SERIES_POINTS, summarize
from tpumem.outputs import create_trace, summary_of
from tpumem.reading.analyses import analysed
from tpumem.reading.many_traces import analyze_processes
from tpumem.reading.plain_json import Unreadable, from_plain, to_plain
from tpumem.reading.summary_files import (
    FORMAT,
    MAX_SUMMARY_BYTES,
    VERSION,
    read_summary,
    summarise_beside,
    write_summary,
)

KiB = 1024


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """Three ranks' traces, each with the summary its recording leaves."""
    directory = tmp_path / "run"
    directory.mkdir()
    for rank, peak in ((0, 6400), (1, 9600), (2, 8000)):
        trace = ranked_trace(directory / f"h-{rank}.tpumem", peak, rank, steps=6)
        assert summarise_beside(trace) is None
    return directory


def test_a_summary_reads_back_as_the_figures_it_was_written_from(run):
    for trace in sorted(run.glob("*.tpumem")):
        fresh = summarize(analysed(trace, series_points=SERIES_POINTS))
        kept = read_summary(trace)
        assert not isinstance(kept, str), kept
        assert kept.made_from == "summary" and fresh.made_from == "trace"
        assert replace(kept, made_from="trace") == fresh  # every field, the line's points too
        (device,) = kept.device_summaries
        assert device.lines[0].line is not None and device.growth_per_step_bytes == LEAK
        assert device.growing and device.growing_at is not None


def test_the_run_from_summaries_is_the_run_from_traces(run, tmp_path):
    from_summaries = analyze_processes(sorted(run.glob("*.tpumem")), workers=0)
    from_traces = analyze_processes(
        sorted(bare_copy(run, tmp_path / "bare").glob("*.tpumem")), workers=0
    )
    assert {p.made_from for p in from_summaries.processes} == {"summary"}
    assert {p.made_from for p in from_traces.processes} == {"trace"}
    assert from_summaries.summarised_here == ()
    assert len(from_traces.summarised_here) == 3
    for a, b in zip(from_summaries.processes, from_traces.processes, strict=True):
        assert replace(a, made_from="trace", path=b.path) == b
    assert from_summaries.spreads == from_traces.spreads
    assert from_summaries.busiest.devices == from_traces.busiest.devices


def test_run_reports_equal_field_by_field_and_say_what_was_read_in_full(run, tmp_path):
    assert_summaries_stand_for_the_traces(run, tmp_path / "bare")
    full = json.loads(run_tpumem("report", str(tmp_path / "bare"), "-f", "json").stdout)
    (note,) = full["notes"]
    assert note.startswith("3 traces were read in full here (") and "no summary beside" in note


def test_check_trusting_summaries_reads_no_trace_but_the_busiest(run):
    """With --trust-summaries, a trace whose start is garbage is never read: its
    summary answers for it (the busiest is read in full for the report), and the
    output says the summaries judged. Its end, which its summary knows it by with
    its size, is as it was. Without, check reads every trace: that one is left
    out, a breach."""
    quiet = run / "h-0.tpumem"
    data = quiet.read_bytes()
    assert len(data) > 4096 + 64
    quiet.write_bytes(b"\0" * 64 + data[64:])
    limits = ("--max-peak", "9000KiB", "--max-growth", "64KiB")
    check = run_tpumem("check", str(run), *limits, "--trust-summaries")
    assert check.returncode == 1, check.stderr
    lines = check.stderr.strip().splitlines()
    assert sum("rank 1 (" in line and "peak 9.4 MiB" in line for line in lines) == 1
    assert sum("grow by 128.0 KiB a step" in line for line in lines) == 3
    assert all("most from train.py:9" in line for line in lines if "grow by" in line)
    assert "left out" not in check.stderr
    assert lines[-1] == (
        "tpumem: 2 of 3 processes judged by the summaries their recordings left, "
        "not by their traces, as --trust-summaries asks"
    )
    gate = run_tpumem("check", str(run), *limits)
    assert gate.returncode == 1, gate.stderr
    assert f"left out {quiet}: " in gate.stderr
    assert "judged by the summaries" not in gate.stderr


def test_a_summary_that_no_longer_stands_for_its_trace_is_not_used(run):
    # rank 0's trace replaced by another of the same name: its summary is stale
    ranked_trace(run / "h-0.tpumem", 5000, 0)
    # rank 2's summary is of a newer version; rank 1's (the busiest) overstates its
    # peak, which makes it the one read in full (one that understates it cannot be
    # told from its summary alone)
    newer = summary_of(run / "h-2.tpumem")
    kept = json.loads(newer.read_text())
    newer.write_text(json.dumps({**kept, "version": VERSION + 1}))
    wrong = summary_of(run / "h-1.tpumem")
    kept = json.loads(wrong.read_text())
    kept["summary"]["peak_bytes"] = 50000 * KiB
    wrong.write_text(json.dumps(kept))
    report = json.loads(run_tpumem("report", str(run), "-f", "json").stdout)
    peaks = {p["index"]: p["peak_bytes"] for p in report["processes"]}
    assert peaks == {0: 5000 * KiB, 1: 9600 * KiB, 2: 8000 * KiB}  # the traces win
    notes = " | ".join(report["notes"])
    assert "h-0.tpumem was read in full here: the trace has changed since its summary" in notes
    assert f"h-2.tpumem was read in full here: its summary is of version {VERSION + 1}" in notes
    assert "h-1.tpumem was read in full here: its summary disagrees with its trace" in notes
    assert "(peak bytes 51200000 in the summary, 9830400 in the trace): the trace wins" in notes
    assert report["busiest"].endswith("h-1.tpumem")
    assert report["busiest_report"]["devices"][0]["peak"]["bytes"] == 9600 * KiB


@pytest.mark.parametrize(
    "damage, words",
    [
        (lambda text: text[: len(text) // 2], "not JSON"),
        (lambda text: "[1, 2]", "not a tpumem summary"),
        (lambda text: text.replace('"peak_bytes":', '"peak_bytes":"x","x":'), "does not read"),
        (lambda text: text.replace('"steps":6', '"steps":true'), "True is not an integer"),
        (lambda text: text.replace('"steps":6', '"steps":1e400'), "inf is not an integer"),
        (lambda text: text.replace('"steps":6', '"steps":' + "9" * 400), "is not an integer"),
        (lambda text: text.replace('"steps":6', '"steps":' + "9" * 30), "is not an integer"),
        (lambda text: text.replace('"steps":6', '"steps":-6'), "a negative size"),
        (lambda text: text.replace('"count":3', '"count":' + "1" * 18), "processes"),
        (lambda text: text.replace('"warnings":0', '"warnings":0,"findings":["x"]'), "holds what"),
        (lambda text: text.replace(f'"format":"{FORMAT}"', '"format":"other"'), "not a tpumem"),
        (lambda text: text.replace('"version":1', '"version":0'), "not one tpumem knows"),
        (lambda text: "\udcff", "not UTF-8"),
    ],
)
def test_a_damaged_summary_says_why_and_the_trace_is_read(run, damage, words):
    trace = run / "h-0.tpumem"
    where = summary_of(trace)
    where.write_bytes(damage(where.read_text()).encode("utf-8", "surrogateescape"))
    found = read_summary(trace)
    assert isinstance(found, str) and words in found, found
    result = analyze_processes(sorted(run.glob("*.tpumem")), workers=0)
    assert [p.made_from for p in result.processes] == ["trace", "summary", "summary"]
    assert result.summarised_here[0][0] == str(trace) and words in result.summarised_here[0][1]


def test_a_killed_process_without_its_summary_is_read_in_full_and_said(run):
    summary_of(run / "h-2.tpumem").unlink()  # its host died before the recording ended
    result = analyze_processes(sorted(run.glob("*.tpumem")), workers=0)
    assert [p.made_from for p in result.processes] == ["summary", "summary", "trace"]
    ((path, why),) = result.summarised_here
    assert path.endswith("h-2.tpumem") and why.startswith("no summary beside it")


def test_a_new_trace_under_a_name_takes_the_old_summary_away(run):
    trace = run / "h-0.tpumem"
    assert summary_of(trace).exists()
    trace.unlink()
    descriptor = create_trace(trace, (), force=False)
    assert not summary_of(trace).exists()
    os.close(descriptor)


def test_the_summary_is_written_whole_or_not_at_all(run, monkeypatch):
    trace = run / "h-0.tpumem"
    before = summary_of(trace).read_bytes()
    summary = read_summary(trace)
    assert not isinstance(summary, str)

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        write_summary(trace, summary)
    assert summary_of(trace).read_bytes() == before
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []


def test_plain_json_refuses_what_is_not_the_declared_type():
    from tpumem.analysis.processes import LineAtPeak, ProcessLine

    line = LineAtPeak("a.py:1", 10, 1)
    assert from_plain(LineAtPeak, to_plain(line)) == line
    for bad in (
        {"line": "a", "bytes": True, "buffers": 1},
        {"line": 3, "bytes": 1, "buffers": 1},
        {"line": "a", "bytes": 1},
        {"line": "a", "bytes": 1, "buffers": 1, "more": 1},
        ["a", 1, 1],
    ):
        with pytest.raises(Unreadable):
            from_plain(LineAtPeak, bad)
    # A line's points: ints are not bools, floats may be written as ints.
    points = ProcessLine((1, 2), (0.5, 1.0), (3, 4))
    assert from_plain(ProcessLine, to_plain(points)) == points
    assert from_plain(ProcessLine, {**to_plain(points), "step_position": [0, 1]}) == replace(
        points, step_position=(0.0, 1.0)
    )
    for bad in ([1, True], [1, 2.5], [1, "2"], [1, None], "12"):
        with pytest.raises(Unreadable):
            from_plain(ProcessLine, {**to_plain(points), "in_use": bad})


def test_a_summary_that_is_no_regular_file_is_not_waited_on(run):
    where = summary_of(run / "h-0.tpumem")
    where.unlink()
    os.mkfifo(where)  # nobody writes to it: a read would wait for ever
    assert read_summary(run / "h-0.tpumem") == "its summary is not a regular file: not read"


def test_a_busiest_trace_that_cannot_be_read_is_left_out_and_the_next_read_in_full(run):
    busiest = run / "h-1.tpumem"
    data = busiest.read_bytes()
    busiest.write_bytes(b"\0" * 64 + data[64:])  # its end (and summary) as they were
    result = analyze_processes(sorted(run.glob("*.tpumem")), workers=0)
    assert [p.index for p in result.processes] == [0, 2]
    assert result.unreadable[0][0] == str(busiest)
    assert result.busiest.path.endswith("h-2.tpumem")


def test_a_runs_files_given_one_by_one_leave_the_summaries_to_their_traces(run):
    given = sorted(str(p) for p in run.iterdir())
    assert len(given) == 6
    report = json.loads(run_tpumem("report", *given, "-f", "json").stdout)
    assert [p["made_from"] for p in report["processes"]] == ["summary"] * 3
    assert report["notes"] == []


def _forged(trace: Path, peak_bytes: int, **fields: object) -> None:
    """The trace's summary, rewritten to say its peak is `peak_bytes`: its size and
    the digest of its end, which anyone can compute, left as they were."""
    where = summary_of(trace)
    kept = json.loads(where.read_text())
    kept["summary"]["peak_bytes"] = peak_bytes
    for device in kept["summary"]["device_summaries"]:
        device["peak_bytes"] = peak_bytes
    where.write_text(json.dumps({**kept, **fields}))


@pytest.fixture
def forged(tmp_path: Path) -> Path:
    """Two ranks: rank 0 peaks at 321 KiB, its summary says 1000 B; rank 1, the
    busiest by the summaries (read in full, as the busiest is), at 200 KiB."""
    directory = tmp_path / "forged"
    directory.mkdir()
    for rank, peak in ((0, 321), (1, 200)):
        assert summarise_beside(ranked_trace(directory / f"h-{rank}.tpumem", peak, rank)) is None
    _forged(directory / "h-0.tpumem", 1000)
    return directory


def test_check_judges_a_run_by_its_traces_not_a_summary_anyone_could_write(forged):
    """check trusted a summary on its trace's size and the digest of its end: one
    saying 1000 B for a process of 321 KiB passed --max-peak 300KiB. A gate reads
    the figures from the traces, unless --trust-summaries asks otherwise, and then
    says so."""
    gate = run_tpumem("check", str(forged), "--max-peak", "300KiB")
    assert gate.returncode == 1, gate.stderr
    (line,) = gate.stderr.strip().splitlines()
    assert line.startswith("tpumem: breach: rank 0 (") and "peak 321.0 KiB" in line
    trusted = run_tpumem("check", str(forged), "--max-peak", "300KiB", "--trust-summaries")
    assert trusted.returncode == 0, trusted.stderr
    assert trusted.stdout.strip() == (
        f"{forged}: within the limits (1 of 2 processes judged by the summaries their "
        "recordings left, not by their traces, as --trust-summaries asks)"
    )


@pytest.mark.parametrize(
    ("made_by", "why"),
    [
        ("0.0.9", "its summary was made by tpumem 0.0.9's analysis, not this one's"),
        (None, "its summary does not say which tpumem's analysis made it"),
        ("9" * 100, "its summary does not say which tpumem's analysis made it"),
    ],
)
def test_a_summary_of_another_tpumems_analysis_is_made_again(forged, made_by, why):
    """A summary records the version of tpumem whose analysis made it; one of
    another (or none said) is made again from its trace, by report and by check
    trusting summaries, and the report says so."""
    trace = forged / "h-0.tpumem"
    where = summary_of(trace)
    kept = json.loads(where.read_text())
    assert kept["tpumem_version"] == tpumem.__version__
    del kept["tpumem_version"]
    where.write_text(json.dumps(kept if made_by is None else {**kept, "tpumem_version": made_by}))
    found = read_summary(trace)
    assert isinstance(found, str) and found.startswith(why), found
    check = run_tpumem("check", str(forged), "--max-peak", "300KiB", "--trust-summaries")
    assert check.returncode == 1 and "rank 0 (" in check.stderr and "321.0 KiB" in check.stderr
    report = json.loads(run_tpumem("report", str(forged), "-f", "json").stdout)
    assert {p["index"]: p["made_from"] for p in report["processes"]} == {0: "trace", 1: "summary"}
    assert f"{trace} was read in full here: {found}" in report["notes"]


def test_a_summary_is_read_as_a_trace_is_not_through_a_link(run, tmp_path):
    """A summary that is a link was followed, and up to 16 MB of what it named
    read (/dev/zero, another run's summary): a summary is the file its recording
    wrote, of the size one has; anything else is not read, and its trace is."""
    trace = run / "h-0.tpumem"
    where = summary_of(trace)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(where.read_bytes())  # (a summary that stands for the trace)
    for target in (elsewhere, Path("/dev/zero")):
        where.unlink()
        where.symlink_to(target)
        assert read_summary(trace) == "its summary is a link: not read"
    where.unlink()
    where.write_text(elsewhere.read_text() + " " * MAX_SUMMARY_BYTES)  # (JSON, and too large)
    larger = f"its summary is larger than {MAX_SUMMARY_BYTES:,} bytes: not read"
    assert read_summary(trace) == larger
    where.unlink()
    where.symlink_to(elsewhere)
    linked = elsewhere.read_bytes()
    report = run_tpumem("report", str(run), "-f", "json")
    assert report.returncode == 0, report.stderr
    notes = json.loads(report.stdout)["notes"]
    assert notes == [f"{trace} was read in full here: its summary is a link: not read"]
    assert where.is_symlink() and elsewhere.read_bytes() == linked  # (left as they were)


def test_a_summary_weighs_kilobytes_well_under_the_bound(run):
    """The bound is generous: a process's summary of one device is a few KB."""
    for trace in run.glob("*.tpumem"):
        assert summary_of(trace).stat().st_size < MAX_SUMMARY_BYTES // 50
