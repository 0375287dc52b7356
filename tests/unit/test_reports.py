"""Reports render the analysis' figures and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_tpumem
from sample_traces import buffer_rows, unseen_rows
from tpumem.analysis import analyze
from tpumem.errors import TpumemError
from tpumem.report import REPORT, reporter, reporter_for
from tpumem.report.live_rows import group_rows
from tpumem.report.rows import device_rows, fact_rows, one_line
from tpumem.trace.reader import load

GOLDEN = str(Path(__file__).parent.parent / "data" / "report_buffer_trace_{}.txt")
# The answer alone, the terminal's default: what fits a screen of 80 x 40.
BRIEF_GOLDEN = str(Path(__file__).parent.parent / "data" / "report_buffer_trace_brief_{}.txt")


def _text(make_trace, width: int, full: bool = True) -> str:
    path = make_trace(buffer_rows(), metadata={"command": ["python", "train.py"]})
    text = reporter(REPORT, "text").render(analyze(load(path)), width=width, full=full)
    return text.replace(str(path), "TRACE")


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("full", [True, False], ids=["full", "answer"])
def test_text_report_matches_golden(make_trace, width, full):
    lines = [line.rstrip() for line in _text(make_trace, width, full).splitlines()]
    golden = (GOLDEN if full else BRIEF_GOLDEN).format(width)
    assert lines == Path(golden).read_text().splitlines()
    assert max(len(line) for line in lines) <= width
    if not full:
        assert len(lines) <= 40 - 1  # (and the prompt's line)


def test_json_report_carries_the_analysis_figures(make_trace):
    path = make_trace(buffer_rows())
    result = run_tpumem("report", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    analysis = analyze(load(path))
    (device,) = report["devices"]
    assert report["schema"] == "tpumem-report/1"
    assert device["peak"]["bytes"] == analysis.devices[0].peak.bytes == 400
    assert device["peak"]["step"] == 2
    assert device["peak"]["groups"][0]["op"] == "B"
    assert device["fragmentation"]["label"] == "modeled"
    assert device["preallocation"]["pool_label"] == "modeled"
    assert device["waste"]["at_peak_bytes"] == 30


def test_output_extension_picks_the_format(make_trace, tmp_path):
    path = make_trace(buffer_rows())
    out = tmp_path / "r.md"
    result = run_tpumem("report", str(path), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_text().startswith("# tpumem report")
    assert "| Peak in use | 400 B at 0.000 s, step 2 | derived |" in out.read_text()
    assert reporter_for(Path("x.json"), None).name == "json"
    assert reporter_for(Path("x.HTM"), None).name == "html"
    assert reporter_for(Path("x.txt"), "md").name == "md"
    assert reporter_for(Path("x.log"), None).name == "text"


def render_csv(analysis, *, width: int = 100, color: bool = False) -> str:
    """A format added for the test below, as docs/layout.md says one is added."""
    return "".join(f"{d.device},{d.peak.bytes}\n" for d in analysis.devices)


def test_a_format_is_one_registry_line(make_trace, monkeypatch):
    """What docs/layout.md says adding a report format takes: a renderer and its
    line in the registry; the format is then chosen by name and by extension."""
    import tpumem.report as report

    monkeypatch.setitem(report.FORMATS_BY_NAME, "csv", report.Format((".csv",)))
    added = report.Reporter(report.REPORT, "csv", "test_reports:render_csv")
    monkeypatch.setitem(report.REPORTERS, (report.REPORT, "csv"), added)
    analysis = analyze(load(make_trace(buffer_rows())))
    assert "csv" in report.formats(report.REPORT)
    assert reporter_for(Path("x.CSV"), None) is added
    assert reporter_for(None, "csv").render(analysis) == "CPU:0,400\n"
    with pytest.raises(TpumemError, match="unknown diff format 'csv'"):
        reporter_for(None, "csv", report.DIFF)
    with pytest.raises(TpumemError, match="no program format 'csv'"):
        reporter(report.PROGRAM, "csv")


def test_a_trace_cut_mid_stream_still_reports_and_says_so(tmp_path):
    from tpumem.trace.writer import TraceWriter

    path = tmp_path / "killed.tpumem"
    with TraceWriter(path, {"framework": "test"}, flush_interval_s=0) as writer:
        for i, size in enumerate((100, 200, 300)):
            writer.alloc(device="CPU:0", bytes=size, buffer_id=i, time_ns=i)
            writer.flush()
    data = path.read_bytes()
    path.write_bytes(data[:-20])  # the end-of-stream marker and part of a batch
    result = run_tpumem("report", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["complete"] is False
    assert report["devices"][0]["peak"]["bytes"] == 300  # the first two allocations
    assert any("not closed" in w for w in report["warnings"])


def _temp_trace(make_trace, fidelity: str, name: str) -> Path:
    rows = [
        {"kind": "alloc", "time_ns": 1, "device": "CPU:0", "buffer_id": 1, "bytes": 4096,
         "region": "temp", "op": "MatMul"},
        {"kind": "alloc", "time_ns": 2, "device": "CPU:0", "buffer_id": 2, "bytes": 1024,
         "region": "output"},
    ]  # fmt: skip
    return make_trace(rows, {"fidelity": {"CPU:0": fidelity}}, name)


def test_temp_buffers_are_labeled_by_where_their_size_came_from(make_trace):
    (measured,) = analyze(load(_temp_trace(make_trace, "allocator", "a.tpumem"))).devices
    (booked,) = analyze(load(_temp_trace(make_trace, "buffer", "b.tpumem"))).devices
    peak = {row[0]: row for row in device_rows(measured)}["Peak in use"]
    assert peak[2].endswith("(4.0 KiB of op temporaries, as allocated)")
    peak = {row[0]: row for row in device_rows(booked)}["Peak in use"]
    assert "programs' temp: XLA's compile-time size" in peak[2]


def test_the_ending_is_one_plain_line(make_trace):
    exception = "OOM: \x1b[1;31mResourceExhausted\x1b[0m\n\n  at op MatMul\n" + "x" * 400
    rows = [{"kind": "alloc", "time_ns": 1, "device": "CPU:0", "buffer_id": 1, "bytes": 8}]
    path = make_trace(rows, {"exit": {"code": 1, "exception": exception}})
    ended = dict(fact_rows(analyze(load(path))))["Ended"]
    assert ended == "uncaught exception: OOM: ResourceExhausted … (exit status 1)"
    assert one_line("a" * 400).endswith("…") and len(one_line("a" * 400)) == 160


def test_words_that_were_wrong_in_small_ways(make_trace):
    """One buffer is "1 buffer"; a run killed before it wrote its end lasts at
    least until its last event (its peak time is on the same clock); programs
    that share a name are told apart; a row-major padding bound far past the
    live bytes is left out."""
    one = [
        {
            "kind": "alloc",
            "time_ns": 5_000_000_000,
            "device": "CPU:0",
            "buffer_id": 1,
            "bytes": 4096,
            "dtype": "float32",
            "shape": "[1024,1]",
        },
        {
            "kind": "alloc",
            "time_ns": 6_000_000_000,
            "device": "CPU:0",
            "buffer_id": 2,
            "bytes": 64,
            "dtype": "float32",
            "shape": "[4,4]",
        },
        {"kind": "free", "time_ns": 7_000_000_000, "device": "CPU:0", "buffer_id": 2, "bytes": 64},
        {"kind": "program", "time_ns": 8, "text": '{"name": "jit_f", "temp_bytes": 64}'},
        {"kind": "program", "time_ns": 9, "text": '{"name": "jit_f", "temp_bytes": 128}'},
    ]
    analysis = analyze(load(make_trace(one, {"source": "tpumem profile"})))
    assert analysis.duration_ns == 7_000_000_000
    (device,) = analysis.devices
    rows = {name: (value, how) for name, value, how in device_rows(device)}
    assert rows["Live at peak"][0].startswith("2 buffers")
    padding = rows["TPU layout padding"][1]
    assert "all row-major" not in padding  # [1024,1] row-major: 128 times its bytes
    from tpumem.report.program_rows import distinct_names

    assert sorted(distinct_names(analysis.compiled)) == ["jit_f (1)", "jit_f (2)"]
    single = [r for r in one[:1]]
    (alone,) = analyze(load(make_trace(single, name="one.tpumem"))).devices
    assert dict((n, v) for n, v, _ in device_rows(alone))["Live at peak"].startswith("1 buffer")
    assert "1 buffers" not in str(device_rows(alone))


def test_growth_without_steps_says_how_to_mark_them(make_trace):
    (device,) = analyze(load(make_trace(buffer_rows()))).devices
    rows = {name: (value, how) for name, value, how in device_rows(device)}
    value, how = rows["Growth across steps"]
    assert value == "not checked: 2 step marks (5 needed)"
    assert how.startswith("not available: mark each step with jax.profiler.StepTraceAnnotation")


def test_bytes_allocated_unseen_have_a_row_in_the_live_table(make_trace):
    """TensorFlow's allocator counts bytes whose allocation no profiler session
    saw: the table of what was live shows them, in their place by size."""
    rows = unseen_rows()
    analysis = analyze(load(make_trace(rows)))
    (device,) = analysis.devices
    table = group_rows(device.peak.groups, device.peak.unattributed_bytes)
    assert [row[:3] for row in table] == [
        ("1000 B", "-", "allocated unseen"),
        ("256 B", "1", "MatMul"),
    ]
    text = reporter(REPORT, "text").render(analysis, width=120)
    assert "allocated unseen" in text.split("Live at peak, largest first")[1]


def test_text_and_markdown_show_every_section_in_one_order(make_trace):
    """report/sections.py decides the sections and their order; each format shows
    every kind of them (a trace with no allocation event says so in both)."""
    from tpumem.report import markdown, sections, text

    assert set(text._SECTIONS) == set(sections.KINDS)
    assert set(markdown._SECTIONS) == set(sections.KINDS) - set(sections.BRIEF_ONLY)
    empty = analyze(load(make_trace([])))
    assert [s.kind for s in sections.report_sections(empty)] == [
        sections.RUN,
        sections.WARNINGS,
        sections.NO_EVENTS,
    ]
    said = "No allocation events in this trace."
    assert said in reporter(REPORT, "text").render(empty)
    assert said in reporter(REPORT, "md").render(empty)


def test_every_fit_note_has_its_words():
    """The analysis notes its advice as data (FitNote); each kind is worded once,
    by report/fit_rows.py, for every format."""
    from tpumem.analysis import advisor
    from tpumem.analysis.padding import LayoutPadding
    from tpumem.report.fit_rows import fit_note

    kinds = [v for k, v in vars(advisor).items() if k.isupper() and isinstance(v, str)]
    kinds = [k for k in kinds if k not in (advisor.TPU_COMPILED,)]  # (needs a compile)
    padding = LayoutPadding(
        label="estimated",
        extra_bytes=600,
        row_major_extra_bytes=None,
        counted_bytes=100,
        uncounted_bytes=0,
        included=False,
    )
    for kind in kinds:
        note = advisor.FitNote(
            kind,
            device="GPU:0",
            bytes=1 << 20,
            setting="X",
            default=0.75,
            accelerator="A100",
            padding=padding,
        )
        assert fit_note(note).strip(), kind
    assert fit_note(advisor.FitNote(advisor.RAN_OUT, device="GPU:0", bytes=1 << 30)).startswith(
        "the run ran out of memory on GPU:0: it needs at least 1.0 GiB"
    )
