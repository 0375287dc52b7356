"""The HTML pages in a real browser (Debian's headless Chromium): the report and the
comparison of real GPU traces, and pages of hostile traces, render clean (no
console message, no failed load, the page's script finished) and show what a
trace names as text, never as markup."""

from __future__ import annotations

import gzip
import shutil
import sys
from pathlib import Path

import pytest

from conftest import run_tpumem
from hostile_traces import HTML, _header, _rows, _with_stack, cases, write
from profiling import EXAMPLES, profile
from tpumem.trace.stack_rows import stack_text

sys.path.insert(0, str(Path(__file__).parent.parent / "browser"))
from chromium_check import probed, rendered

GPU = Path(__file__).parent.parent / "data" / "gpu"
DEMO = Path(__file__).parent.parent / "data" / "demo"
INJECTED = ('<img src="x"', "<script>alert", 'onerror="alert')


@pytest.fixture(scope="module", autouse=True)
def chromium():
    # `make test` installs it where it is missing; without it this is a failure.
    assert shutil.which("chromium"), "Debian's chromium is not installed (make test installs it)"


def _page(args: list[str]) -> tuple[list[str], str]:
    result = run_tpumem(*args)
    assert result.returncode == 0, result.stderr
    return rendered(Path(args[args.index("-o") + 1]))


def test_the_report_page_of_a_real_trace(tmp_path):
    page = tmp_path / "mlp.html"
    problems, dom = _page(["report", str(GPU / "mlp.tpumem"), "-o", str(page)])
    assert problems == []
    assert 'data-rendered="ok"' in dom
    assert "GPU:0" in dom
    assert page.with_suffix(".png").stat().st_size > 10_000  # a screenshot to look at


def test_the_page_opens_with_the_answer(tmp_path):
    """The JAX example: the page's first screen is the peak, its kinds, the lines
    inside the step that hold it and what to change, in the text report's words."""
    sizes = ["--width", "64", "--layers", "1", "--seq", "32", "--steps", "3"]
    script = str(EXAMPLES / "jax_transformer.py")
    result = profile(tmp_path, "-q", "-o", "jax.tpumem", script, *sizes)
    assert result.returncode == 0, result.stderr[-3000:]
    trace, page = tmp_path / "jax.tpumem", tmp_path / "jax.html"
    problems, dom = _page(["report", str(trace), "-o", str(page)])
    assert problems == []
    text = run_tpumem("report", str(trace), "--width", "400").stdout
    headline = text.splitlines()[1]
    assert headline.startswith("Peak ")
    body = dom[dom.index("<body") :]
    # The first heading under the title is the headline, then the answer's tables.
    first = body.index("<h2>")
    assert body[first + len("<h2>") :].startswith(headline), body[first : first + 200]
    answer = body[first : body.index("Framework")]
    for title in ("What the peak is", "Lines holding the peak", "What to change"):
        assert title in answer, title
    assert "examples/jax_transformer.py:" in answer  # a line inside the step
    assert page.with_suffix(".png").stat().st_size > 10_000  # a screenshot to look at


def test_a_capacity_too_small_opens_the_page_with_the_modeled_failure(tmp_path):
    page = tmp_path / "tight.html"
    problems, dom = _page(
        ["report", str(GPU / "mlp.tpumem"), "--capacity", "1MiB", "-o", str(page)]
    )
    assert problems == []
    assert 'class="banner failed"' in dom and "out of memory (modeled)" in dom
    assert "Live at the modeled failure" in dom


@pytest.mark.parametrize("name", ["html in names", "escapes everywhere", "stack names html"])
def test_a_hostile_trace_shows_its_names_as_text(tmp_path, name):
    trace = cases()[name](tmp_path / "hostile.tpumem")
    problems, dom = _page(["report", str(trace), "-o", str(tmp_path / "hostile.html")])
    assert problems == []
    for injected in INJECTED:
        assert injected not in dom
    if name != "escapes everywhere":
        assert HTML.replace("<", "&lt;").replace(">", "&gt;") in dom
    if name == "stack names html":  # the flame graph drew the hostile frames as text
        assert "flame graph of the bytes live at the peak" in dom


def test_a_program_with_markup_for_names_shows_them_as_text(tmp_path):
    """The page's compiled programs: the table, the picker and the program's heap
    chart and buffers, with every name from the HLO shown as text."""
    trace = cases()["hlo names html"](tmp_path / "programs.tpumem")
    page = tmp_path / "programs.html"
    problems, dom = _page(["report", str(trace), "--program", "handmade", "-o", str(page)])
    assert problems == []
    assert 'data-program="handmade"' in dom and "<select" in dom
    assert "<svg" in dom.split('data-program="handmade"', 1)[1]
    for injected in INJECTED:
        assert injected not in dom


def test_the_compare_page_with_a_hostile_run(tmp_path):
    hostile = cases()["html in names"](tmp_path / "hostile.tpumem")
    page = tmp_path / "compare.html"
    result = run_tpumem(
        "compare", str(GPU / "mlp.tpumem"), str(GPU / "known.tpumem"), str(hostile),
        "--html", str(page),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    problems, dom = rendered(page)
    assert problems == []
    for injected in INJECTED:
        assert injected not in dom
    assert "mlp" in dom and "known" in dom


def test_the_diff_page_of_hostile_runs(tmp_path):
    """Both runs' timelines, the change tables and the flame graph of the
    difference, with every frame a hostile trace names shown as text."""
    before = cases()["html in names"](tmp_path / "before.tpumem")
    after = cases()["stack names html"](tmp_path / "after.tpumem")
    page = tmp_path / "diff.html"
    problems, dom = _page(["diff", str(before), str(after), "-o", str(page)])
    assert problems == []
    assert "flame graph of the bytes live at the peak" in dom
    assert "Bytes in use over time, both runs" in dom
    for injected in INJECTED:
        assert injected not in dom


def test_the_run_page_of_hostile_processes(tmp_path):
    """A distributed run's page: the processes' table, the spread, their lines on
    one axis and the busiest process in full, every name its traces hold shown as
    text."""
    run = tmp_path / "run"
    run.mkdir()
    for rank in (0, 1):
        process = {"index": rank, "count": 2, "source": HTML}
        header = _header(host=HTML, pid=100 + rank, run=HTML, process=process)
        write(run / f"h-{rank}.tpumem", _rows(op=HTML, count=4 + rank), header=header)
    problems, dom = _page(["report", str(run), "-o", str(tmp_path / "run.html")])
    assert problems == []
    assert "Bytes in use on each process" in dom and "Spread across processes" in dom
    assert "rank 1 (busiest)" in dom
    for injected in INJECTED:
        assert injected not in dom


def test_the_page_words_the_fit_as_the_text_report_does(tmp_path):
    """The page draws the fit table from the answers report/rows.py words (it once
    worded its own, and never said "(estimate)" for a TPU)."""
    from tpumem.analysis import analyze
    from tpumem.report.fit_rows import fit_answer, fit_title
    from tpumem.trace.reader import load

    fit = analyze(load(GPU / "mlp.tpumem")).fit
    assert fit is not None and any(row.kind == "tpu" for row in fit.rows)
    problems, dom = _page(["report", str(GPU / "mlp.tpumem"), "-o", str(tmp_path / "fit.html")])
    assert problems == []
    assert fit_title(fit.device) in dom
    for row in fit.rows:
        assert fit_answer(row) in dom, fit_answer(row)
    assert "(estimate)" in dom


def test_the_page_formats_bytes_as_the_text_report_does(tmp_path):
    """report.js formats bytes itself (its plots' axes and tips need it for any
    value): the program it opens says its peak as format_bytes does, and the heap
    simulator's whole-program figures likewise."""
    from tpumem.analysis import analyze
    from tpumem.report.page_words import PAGE_WORDS
    from tpumem.trace.reader import load
    from tpumem.units import format_bytes

    trace = GPU / "run" / "vm-1.tpumem"
    programs = [p for p in analyze(load(trace)).compiled if p.heap]
    assert programs
    problems, dom = _page(["report", str(trace), "-o", str(tmp_path / "b.html")])
    assert problems == []
    # The page opens the largest program with a heap (the first in peak order).
    heap = programs[0].heap
    title = str(PAGE_WORDS["program_peak_title"]).format(programs[0].name, "")
    assert f"{title.split(':')[0]}: {format_bytes(heap.peak_bytes)} at its peak" in dom
    note = str(PAGE_WORDS["whole_program_note"]).format(
        format_bytes(heap.whole_program_bytes),
        format_bytes(heap.parameter_bytes),
        format_bytes(heap.output_bytes),
    )
    assert note.replace("'", "&#39;") in dom or note in dom, note


def test_the_page_at_1024_px_scrolls_no_sideways_and_ticks_the_steps(tmp_path):
    """The JAX demo run's page in a window 1024 px wide: nothing wider than the
    window (its charts were 1100 px), the timeline before the run's facts, its
    step marks ticked on it, and the flame graph's library frames named from
    their package, not the environment's whole path (as XLA's metadata names
    optax's frames inside a jitted step: the demo's are too small to draw)."""
    trace = tmp_path / "jax.tpumem"
    trace.write_bytes(gzip.decompress((DEMO / "jax_transformer.tpumem.gz").read_bytes()))
    page = tmp_path / "jax.html"
    problems, _ = _page(["report", str(trace), "-o", str(page)])
    assert problems == []
    found = probed(
        page,
        """() => ({
          "scroll-width": document.documentElement.scrollWidth,
          "client-width": document.documentElement.clientWidth,
          "timeline-top": Math.round(
            document.querySelector(".timeline").getBoundingClientRect().top),
          "facts-top": Math.round([...document.querySelectorAll("th")].find(
            (th) => th.textContent === "Framework").getBoundingClientRect().top),
          "ticks": document.querySelectorAll(".step-tick").length,
          "labels": [...document.querySelectorAll(".step-label")]
            .map((t) => t.textContent).join("|"),
        })""",
    )
    assert int(found["scroll-width"]) <= int(found["client-width"]) <= 1024, found
    assert int(found["timeline-top"]) < int(found["facts-top"]), found
    assert int(found["ticks"]) >= 20 and found["labels"].startswith("step 0|"), found
    library = "../.venv/lib/python3.11/site-packages/optax/_src/transform.py"
    frames = [("train.py", 9, "<module>"), (library, 120, "update_fn")]
    trace = write(tmp_path / "stacked.tpumem", _with_stack(1, stack_text(frames)), _header())
    page = tmp_path / "stacked.html"
    problems, _ = _page(["report", str(trace), "-o", str(page)])
    assert problems == []
    frames = probed(
        page,
        """() => ({"frames": [...document.querySelectorAll(".flame title")]
          .map((t) => t.textContent.split("\\n").slice(0, 2).join(" ~ ")).join("|")})""",
    )["frames"]
    # A frame's label is its package's path; its tooltip's next line, the whole one.
    assert f"update_fn  optax/_src/transform.py:120 ~ {library}:120" in frames, frames
    labels = [frame.split(" ~ ")[0] for frame in frames.split("|")]
    assert not [label for label in labels if "site-packages" in label], labels
