"""The HTML page: the data it embeds is the analysis' own, names from traces stay
text, and nothing is fetched from anywhere."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from page_data import embedded

from conftest import run_tpumem
from sample_traces import buffer_rows
from tpumem.analysis import analyze
from tpumem.analysis.device_events import split_by_device
from tpumem.analysis.peak import NO_REGION
from tpumem.report import HTML_SERIES_POINTS
from tpumem.report.answer_rows import KINDS_TITLE
from tpumem.report.fit_rows import fit_answer, fit_title
from tpumem.report.html import DATA_ID
from tpumem.report.rows import device_rows, fact_rows, headline_rows
from tpumem.trace.reader import load

HOSTILE = "</script><script>alert(1)</script>"
HOSTILE_SOURCE = '<img src=x onerror="alert(2)">:7'


def _loop_rows(steps: int = 40) -> list[dict]:
    """A training loop: a parameter, then per step three activations freed in
    turn; the step 17 allocates one more, the peak."""
    rows = [
        {
            "kind": "alloc",
            "time_ns": 0,
            "device": "CPU:0",
            "buffer_id": 0,
            "bytes": 4096,
            "op": "param",
            "region": "parameter",
            "dtype": "float32",
            "shape": "[32,32]",
        },
    ]
    ident = 1
    for step in range(steps):
        t = 1000 * (step + 1)
        rows.append({"kind": "mark", "time_ns": t, "text": "step", "step": step})
        live = []
        for k in range(3 + (step == 17)):
            size = 1024 * (k + 1)
            rows.append(
                {
                    "kind": "alloc",
                    "time_ns": t + 10 * k + 1,
                    "device": "CPU:0",
                    "buffer_id": ident,
                    "bytes": size,
                    "op": f"layer{k}",
                    "region": "activation",
                    "dtype": "float32",
                    "shape": f"[{size // 4}]",
                }
            )
            live.append((ident, size))
            ident += 1
        for n, (buffer, size) in enumerate(live):
            rows.append(
                {
                    "kind": "free",
                    "time_ns": t + 500 + n,
                    "device": "CPU:0",
                    "buffer_id": buffer,
                    "bytes": size,
                }
            )
    return rows


def test_the_report_page_embeds_the_analysis(make_trace, tmp_path):
    trace = make_trace(_loop_rows())
    page_path = tmp_path / "r.html"
    result = run_tpumem("report", str(trace), "-o", str(page_path))
    assert result.returncode == 0, result.stderr
    data = embedded(page_path.read_text())
    report = json.loads(run_tpumem("report", str(trace), "--format", "json").stdout)
    (run,) = data["runs"]
    device = run["devices"][0]
    series = device.pop("series")
    device["peak"].pop("groups_total")
    facts, figures = run.pop("facts"), device.pop("figures")
    headline, tables = run.pop("headline"), run.pop("failure_tables")
    answer = run.pop("answer")
    report["devices"][0].pop("series")
    fit_words = {key: run["fit"].pop(key) for key in ("title", "explanation")}
    rows_words = [
        {key: row.pop(key) for key in ("answer", "setting_text", "capacity_text")}
        for row in run["fit"]["rows"]
    ]
    assert run == report  # every figure, as the JSON report gives it
    analysis = analyze(load(trace), series_points=HTML_SERIES_POINTS)
    # The fit table's words are the text report's.
    assert analysis.fit is not None
    assert fit_words["title"] == fit_title(analysis.fit.device)
    assert [w["answer"] for w in rows_words] == [fit_answer(r) for r in analysis.fit.rows]
    # The page's rows are the text report's, word for word.
    assert headline + facts == [list(row) for row in headline_rows(analysis) + fact_rows(analysis)]
    assert answer["headline"] == "Peak 14.0 KiB on CPU:0 at 0.000 s, step 17 (derived)"
    # (No line: the trace recorded none, so no table of lines.)
    assert [t["title"] for t in answer["tables"]] == [KINDS_TITLE]
    assert headline == tables == []  # the run neither failed nor was asked a capacity
    assert figures == [list(row) for row in device_rows(analysis.devices[0])]
    expected = analysis.devices[0].series
    assert series["in_use"] == list(expected.in_use)
    assert max(series["in_use"]) == analysis.devices[0].peak.bytes == 4096 + 1024 * 10
    stack = np.sum([values for _, values in series["regions"]], axis=0)
    assert stack.tolist() == series["in_use"]  # the regions add up to the line
    assert {name for name, _ in series["regions"]} == {"parameter", "activation"}
    # Step 17 is where the peak is: the point at the peak sits inside step 17.
    at_peak = int(np.argmax(series["in_use"]))
    assert 17 <= series["step_position"][at_peak] < 18


def test_the_page_has_the_runs_rows_and_its_capture_gaps(make_trace, tmp_path):
    """How the run ended, its capture, what tpumem set and what the framework does
    not expose reach the page; stretches the capture missed are drawn as such."""
    metadata = {
        "exit": {"code": 1, "exception": "ValueError: boom"},
        "capture": {"chunks": 3, "chunk_s": 1.0, "gaps": 1, "gap_total_ns": 8 * 10**9,
                    "gap_max_ns": 8 * 10**9, "covered_fraction": 0.2},
        "set_by_tpumem": {"PJRT_DEVICE": "CPU"},
        "not_exposed": ["bytes in use: UNIMPLEMENTED"],
    }  # fmt: skip
    rows = [
        {"kind": "alloc", "time_ns": 10**9, "device": "CPU:0", "buffer_id": 1, "bytes": 100},
        {"kind": "mark", "time_ns": 2 * 10**9, "text": "capture gap"},
        {"kind": "mark", "time_ns": 10 * 10**9, "text": "capture resumed"},
        {"kind": "alloc", "time_ns": 11 * 10**9, "device": "CPU:0", "buffer_id": 2, "bytes": 50},
    ]
    page = tmp_path / "r.html"
    assert run_tpumem("report", str(make_trace(rows, metadata)), "-o", str(page)).returncode == 0
    (run,) = embedded(page.read_text())["runs"]
    facts = dict(run["facts"])
    assert facts["Ended"] == "uncaught exception: ValueError: boom (exit status 1)"
    assert facts["Capture"].startswith("3 profiler sessions of 1 s; 1 gap")
    assert facts["Set by tpumem"] == "PJRT_DEVICE=CPU"
    assert facts["Not exposed"] == "bytes in use: UNIMPLEMENTED"
    assert run["devices"][0]["series"]["gaps_ns"] == [[2 * 10**9, 10 * 10**9]]


def test_drawing_points_are_thinned_but_keep_the_peak(make_trace):
    analysis = analyze(load(make_trace(_loop_rows(steps=200))), series_points=50)
    series = analysis.devices[0].series
    # Each of 50 stretches by its highest event and its last.
    assert len(series.time_ns) <= 2 * 50 < series.events
    assert max(series.in_use) == analysis.devices[0].peak.bytes
    # The last point is the run's last event: a quiet end is drawn as it was.
    events = split_by_device(load(make_trace(_loop_rows(steps=200), name="again.tpumem")))[0]
    assert series.in_use[-1] == int(events.in_use[-1])
    assert series.time_ns[-1] == int(events.time_ns[-1])


def test_names_from_traces_stay_text(make_trace, tmp_path):
    rows = buffer_rows()
    rows[1] = {**rows[1], "op": HOSTILE, "source": HOSTILE_SOURCE, "region": None}
    trace = make_trace(rows, {"framework": "jax"})
    page_path = tmp_path / "r.html"
    assert run_tpumem("report", str(trace), "-o", str(page_path)).returncode == 0
    page = page_path.read_text()
    assert "<script>alert" not in page
    assert "<img" not in page
    assert page.count("</script>") == 3  # the data's element and the code's two
    group = embedded(page)["runs"][0]["devices"][0]["peak"]["groups"]
    assert {g["op"] for g in group} >= {HOSTILE}
    assert {g["source"] for g in group} >= {HOSTILE_SOURCE}
    # The code inserts trace names as text only.
    code = _code(page)
    assert "innerHTML" not in code and "insertAdjacentHTML" not in code
    assert "document.write" not in code


def _code(page: str) -> str:
    """The page's scripts: all that follows the data's element."""
    data_end = page.index("</script>", page.index(f'id="{DATA_ID}"'))
    return page[data_end:]


def test_the_page_fetches_nothing(make_trace, tmp_path):
    trace = make_trace(buffer_rows())
    page_path = tmp_path / "r.html"
    assert run_tpumem("report", str(trace), "-o", str(page_path)).returncode == 0
    page = page_path.read_text()
    for fetching in (
        "src=",
        "href=",
        "<link",
        "url(",
        "@import",
        "fetch(",
        "XMLHttpRequest",
        "import(",
        "<iframe",
        "<img",
    ):
        assert fetching not in page, fetching
    # The only address in the code is SVG's namespace name; the accelerators'
    # sources are shown as text in the data.
    code = _code(page)
    assert re.findall(r"https?://[^\s\"']+", code) == ["http://www.w3.org/2000/svg"]


def test_the_compare_page_embeds_the_comparison(make_trace, tmp_path):
    first = make_trace(buffer_rows(), {"framework": "jax"}, name="a.tpumem")
    second = make_trace(_loop_rows(), {"framework": "tensorflow"}, name="b.tpumem")
    page_path = tmp_path / "c.html"
    result = run_tpumem("compare", str(first), str(second), "--html", str(page_path))
    assert result.returncode == 0, result.stderr
    data = embedded(page_path.read_text())
    as_json = json.loads(run_tpumem("compare", str(first), str(second), "-f", "json").stdout)
    runs = as_json.pop("runs")
    assert data["comparison"] == as_json
    assert data["comparison"]["names"] == ["jax", "tensorflow"]
    assert [r["devices"][0]["peak"]["bytes"] for r in data["runs"]] == [
        r["devices"][0]["peak"]["bytes"] for r in runs
    ]
    assert data["comparison"]["alignment"] == "step"
    assert all(r["devices"][0]["series"]["in_use"] for r in data["runs"])
    assert NO_REGION not in {n for n, _ in data["runs"][1]["devices"][0]["series"]["regions"]}


def test_the_page_says_only_the_words_python_gives_it():
    """report.js draws; its titles and notes are report/page_words.py's, each used,
    each asked for with as many values as it has blanks."""
    from tpumem.report.page_words import PAGE_WORDS

    assets = Path(__file__).parent.parent.parent / "tpumem/report/assets"
    script = "\n".join(path.read_text() for path in sorted(assets.glob("*.js")))
    calls = [
        (m.group(1), _arguments(script, m.end())) for m in re.finditer(r'say\("(\w+)"', script)
    ]
    assert calls
    # Lists (column titles) and pairs are read whole, not filled.
    read = set(re.findall(r'heads\("(\w+)"\)', script)) | set(
        re.findall(r"data\.words\.(\w+)", script)
    )
    used = {key for key, _ in calls} | read
    assert used == set(PAGE_WORDS), used ^ set(PAGE_WORDS)
    for key, values in calls:
        assert PAGE_WORDS[key].count("{}") == values, key
    # Nothing worded left in the script: a quoted string of words is a key's or a
    # class's, never a title (comments aside).
    code = "\n".join(line.split("//")[0] for line in script.splitlines())
    worded = re.findall(r'"([a-z]+(?: [a-z]+)+)"', code)
    classes = {"banner failed", "scroll short", "chart timeline", "chart buffers"}
    assert set(worded) <= {"per second", "use strict", *classes}, worded


def _arguments(script: str, start: int) -> int:
    """How many values follow the key in a call that starts at `start` (after the
    key): commas at the call's own depth, quotes skipped."""
    depth, values, quote = 0, 0, None
    for char in script[start:]:
        if quote:
            quote = None if char == quote else quote
        elif char in "\"'`":
            quote = char
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            if depth == 0:
                return values
            depth -= 1
        elif char == "," and depth == 0:
            values += 1
    raise AssertionError("a call that never ends")
