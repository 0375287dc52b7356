"""`tpumem check`: limits for CI, sizes as people write them."""

from __future__ import annotations

import pytest

from conftest import run_tpumem
from sample_traces import buffer_rows
from tpumem.units import parse_bytes


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("12GiB", 12 << 30),
        ("800MB", 800_000_000),
        ("1.5 GiB", 3 << 29),
        ("4096", 4096),
        ("64kib", 65536),
        ("2g", 2_000_000_000),
        ("1 PiB", 1 << 50),  # (the largest unit a report prints)
        ("1PB", 10**15),
        (".5kb", 500),
        ("1.1 GB", 1_100_000_000),  # (exact: no float rounds it)
        ("9223372036854775807", 2**63 - 1),
    ],
)
def test_sizes(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize(
    "text",
    ["", "GiB", "12 parsecs", "-5MB", "1e9", "0.5", "1.3KiB", "\uff11\uff12", "1 EiB", "8 EiB"],
)
def test_bad_sizes(text):
    with pytest.raises(ValueError):
        parse_bytes(text)


def test_a_run_within_its_limits_passes(make_trace):
    trace = make_trace(buffer_rows())  # peak 400 B, fragmentation modeled
    result = run_tpumem("check", str(trace), "--max-peak", "400", "--max-fragmentation", "1")
    assert result.returncode == 0, result.stderr
    assert "within the limits" in result.stdout


def test_each_breach_is_a_line_and_exit_status_1(make_trace):
    trace = make_trace(buffer_rows())
    result = run_tpumem("check", str(trace), "--max-peak", "399B")
    assert result.returncode == 1
    (line,) = result.stderr.strip().splitlines()
    assert "CPU:0: peak 400 B (400 bytes) is over the limit 399 B" in line


def test_limits_that_cannot_be_shown_kept_are_a_breach(make_trace):
    rows = [r for r in buffer_rows() if r["kind"] != "free"]  # nothing freed: no holes
    trace = make_trace(rows)
    assert run_tpumem("check", str(trace), "--max-fragmentation", "0").returncode == 0
    empty = make_trace([{"kind": "mark", "time_ns": 0, "text": "step", "step": 0}], name="e.tpumem")
    result = run_tpumem("check", str(empty), "--max-fragmentation", "0.3")
    assert result.returncode == 1
    assert "nothing shows the limits were kept" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--max-peak", "12 parsecs"],
        ["--max-peak", "lots"],
        [],  # nothing to check
    ],
)
def test_bad_limits_are_one_line_and_exit_status_2(make_trace, args):
    result = run_tpumem("check", str(make_trace(buffer_rows())), *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_a_missing_trace_is_one_line(tmp_path):
    result = run_tpumem("check", str(tmp_path / "none.tpumem"), "--max-peak", "1GiB")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_breach_shows_line_and_paragraph_separators_from_the_trace_escaped(make_trace):
    """U+2028 and U+2029 end a line for many a terminal and log viewer: a device
    named with them would print a line of the trace's choosing under the breach."""
    rows = [dict(r, device="CPU:0\u2028tpumem: within the limits\u2029") for r in buffer_rows()]
    rows = [{k: v for k, v in r.items() if r["kind"] != "mark" or k != "device"} for r in rows]
    result = run_tpumem("check", str(make_trace(rows)), "--max-peak", "399B")
    assert result.returncode == 1, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "\u2028" not in result.stderr and "\u2029" not in result.stderr
    assert line.startswith("tpumem: breach: CPU:0\\u2028tpumem: within the limits\\u2029: peak")
