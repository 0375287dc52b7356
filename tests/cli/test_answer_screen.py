"""The terminal's report opens with the answer alone, on one screen of 80 x 40:
each demo run's (four frameworks), with the command that shows the rest; --full
and a file (-o) get the whole report."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from rich.cells import cell_len

from conftest import run_tpumem

DEMO = Path(__file__).parent.parent / "data" / "demo"
RUNS = ("tf_transformer", "jax_transformer", "torch_xla_transformer", "torch_transformer")


@pytest.fixture(params=RUNS)
def demo_trace(tmp_path, request) -> Path:
    trace = tmp_path / f"{request.param}.tpumem"
    trace.write_bytes(gzip.decompress((DEMO / f"{request.param}.tpumem.gz").read_bytes()))
    return trace


def test_the_answer_fits_a_screen_of_80_by_40(demo_trace):
    result = run_tpumem("report", str(demo_trace), "--width", "80")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) <= 39, result.stdout  # (and the prompt's line)
    # (The title and the command hold the path whole, to be copied.)
    assert max(len(line) for line in lines[1:-1]) <= 80, result.stdout
    assert lines[1].startswith("Peak ") and "What the peak is" in result.stdout
    assert lines[-1] == f"  tpumem report {demo_trace} --full"
    assert "Pool held from device" not in result.stdout  # (the figures: --full)


def test_full_and_a_file_get_the_whole_report(demo_trace, tmp_path):
    whole = run_tpumem("report", str(demo_trace), "--full", "--width", "80")
    assert whole.returncode == 0, whole.stderr
    assert "Pool held from device" in whole.stdout and "--full" not in whole.stdout
    answer = run_tpumem("report", str(demo_trace), "--width", "80").stdout
    # The answer's own lines open the whole report too (each row one line there).
    assert whole.stdout.splitlines()[1] == answer.splitlines()[1]
    written = run_tpumem("report", str(demo_trace), "--width", "80", "-o", str(tmp_path / "r.txt"))
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "r.txt").read_text() == whole.stdout


def test_the_comparison_at_80_columns_cuts_no_word(tmp_path):
    """The four demo runs side by side at 80 columns: a table too wide changes
    shape (a block per run) rather than cut or fold its words."""
    traces = []
    for run in RUNS:
        trace = tmp_path / f"{run}.tpumem"
        trace.write_bytes(gzip.decompress((DEMO / f"{run}.tpumem.gz").read_bytes()))
        traces.append(str(trace))
    result = run_tpumem("compare", *traces, "--width", "80")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(cell_len(line) for line in lines) <= 80
    assert not [line for line in lines if "…" in line], result.stdout
    for run in RUNS:  # each run's file, whole, in the legend
        assert any(line.endswith(f" of {run}.tpumem") for line in lines), result.stdout
    # The figures a block shows are the table's: each run's peak, on its own row.
    peaks = [line for line in lines if line.startswith("Peak in use ")]
    assert len(peaks) == len(RUNS), result.stdout
