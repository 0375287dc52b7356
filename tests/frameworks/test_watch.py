"""Watching a run: `tpumem watch TRACE` follows a trace a real profiled JAX run is
writing and ends with the run's peak, as the analysis of the whole trace gives it;
`tpumem profile` on a (pseudo-)terminal shows one live line under the script's own
output, gone when the report prints."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

from conftest import assert_one_line_error, run_tpumem
from profiling import EXAMPLES, InATerminal, profile
from tpumem.launch.status_line import CLEAR
from tpumem.units import format_bytes, format_seconds

SIZES = ["--width", "64", "--layers", "1", "--seq", "32"]


def _peak_said(trace) -> str:
    report = json.loads(run_tpumem("report", str(trace), "--format", "json").stdout)
    device = max(report["devices"], key=lambda d: d["peak"]["bytes"])
    peak = device["peak"]
    return (
        f"peak {format_bytes(peak['bytes'])} on {device['device']} at "
        f"{format_seconds(peak['time_ns'])}, step {peak['step']:,}"
    )


def test_watch_follows_a_run_to_its_end_and_its_peak(tmp_path):
    trace = tmp_path / "run.tpumem"
    # Watching first: the trace it names is waited for.
    watch = subprocess.Popen(
        [sys.executable, "-m", "tpumem", "watch", str(trace), "--interval", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    time.sleep(1)
    assert watch.poll() is None  # still waiting for the trace
    script = str(EXAMPLES / "jax_transformer.py")
    result = profile(tmp_path, "-q", "-o", str(trace), script, *SIZES, "--steps", "40")
    assert result.returncode == 0, result.stderr[-3000:]
    out, err = watch.communicate(timeout=120)
    assert watch.returncode == 0, err
    lines = out.splitlines()
    assert lines[-1].startswith("tpumem: the run ended (closed by its writer): ")
    assert _peak_said(trace) in lines[-1]
    # The last live line: the steps the run marked, and the peak where the report has it.
    assert "step 39" in lines[-2] and " in use " in lines[-2], lines[-2]


def test_watch_of_a_killed_run_says_so(tmp_path, make_trace):
    """A trace whose writer died without closing it: watch ends at once."""
    complete = make_trace(
        [{"kind": "alloc", "time_ns": 5, "device": "GPU:0", "buffer_id": 1, "bytes": 4096}]
    )
    cut = tmp_path / "cut.tpumem"
    cut.write_bytes(complete.read_bytes()[:-8])  # no end-of-stream marker
    result = run_tpumem("watch", str(cut))
    assert result.returncode == 0, result.stderr
    assert "its writer ended without closing it" in result.stdout
    assert "peak 4.0 KiB on GPU:0" in result.stdout


def test_watch_of_a_file_that_is_not_a_trace_is_one_line(tmp_path):
    bad = tmp_path / "bad.tpumem"
    bad.write_bytes(b"not a trace at all" * 10)
    result = run_tpumem("watch", str(bad))
    assert result.returncode == 2
    assert result.stderr.startswith("tpumem: error: ") and len(result.stderr.splitlines()) == 1


def test_profile_shows_a_live_line_on_a_terminal(tmp_path):
    script = str(EXAMPLES / "jax_transformer.py")
    terminal = InATerminal(tmp_path, "profile", "-o", "run.tpumem", script, *SIZES, "--steps", "60")
    shown = terminal.finish(timeout_s=240)
    assert terminal.process.returncode == 0, shown[-3000:]
    clear = CLEAR.decode()
    lines = [part for part in shown.split(clear) if part.startswith("tpumem: ")]
    live = [line for line in lines if " in use " in line]
    assert live, shown[-3000:]
    # It reads the trace as it grows: the step moves on, the peak is there.
    assert len({line.split(" · ")[1] for line in live if " · step " in line}) >= 2, live
    assert all(" peak " in line for line in live)
    # The script's own line is whole, above it; the report comes after the line is gone.
    assert "JAX transformer: " in shown and "parameters" in shown
    report = shown.index("Peak ")
    assert shown.rindex(clear, 0, report) > shown.rindex(" in use ", 0, report)
    assert clear + "tpumem: " not in shown[report:]
    peak = _peak_said(tmp_path / "run.tpumem").split(" on ")[0]
    assert shown[report:].startswith("P" + peak[1:])


def test_no_live_line_without_a_terminal(tmp_path):
    script = str(EXAMPLES / "jax_transformer.py")
    result = profile(tmp_path, "-o", "run.tpumem", script, *SIZES, "--steps", "3")
    assert result.returncode == 0, result.stderr[-3000:]
    assert CLEAR.decode() not in result.stderr
    assert not [line for line in result.stderr.splitlines() if " · peak " in line]


def test_watch_shows_a_hostile_line_escaped(make_trace):
    """Names from a trace reach the terminal as escapes, never as control codes."""
    hostile = "train.py:7\x1b]0;pwned\x07\u202e"
    trace = make_trace(
        [
            {"kind": "alloc", "time_ns": 5, "device": "GPU:0\x1b[2J", "buffer_id": 1,
             "bytes": 4096, "source": hostile},
        ]
    )  # fmt: skip
    result = run_tpumem("watch", str(trace))
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout and "\u202e" not in result.stdout
    assert "train.py:7\\x1b]0;pwned\\x07\\u202e" in result.stdout


def test_watch_of_a_damaged_batch_ends_there(tmp_path):
    """A batch whose values are not valid (a device code past its dictionary): watch
    reads up to it, as report does, and says so; no traceback."""
    import pyarrow as pa

    from hostile_traces import _rows, _table_with, write
    from tpumem.trace.columns import rows_to_batch

    index_type = rows_to_batch(_rows()).schema.field("device").type.index_type
    codes = pa.array([0, 5, 100000, 0, 0], type=index_type)
    devices = pa.DictionaryArray.from_arrays(codes, pa.array(["GPU:0"]), safe=False)
    trace = write(tmp_path / "damaged.tpumem", batch=_table_with("device", devices))
    result = run_tpumem("watch", str(trace))
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "damaged after its first 0 rows" in result.stdout


def test_the_live_line_keeps_the_scripts_outputs_in_order(tmp_path):
    """A script that writes to stdout and stderr in turn, on a terminal: under the
    live line they come out in the order it wrote them, as on the terminal."""
    (tmp_path / "turns.py").write_text(
        "import sys, time\n"
        "import jax.numpy as jnp\n"
        "kept = jnp.ones(1024)\n"
        "for i in range(30):\n"
        "    print(f'out {i}', flush=True)\n"
        "    print(f'err {i}', file=sys.stderr, flush=True)\n"
        "    time.sleep(0.05)\n"
    )
    terminal = InATerminal(tmp_path, "profile", "-o", "turns.tpumem", "turns.py")
    shown = terminal.finish(timeout_s=120)
    assert terminal.process.returncode == 0, shown[-3000:]
    clear = CLEAR.decode()
    assert clear + "tpumem: " in shown  # the live line was there
    text = re.sub(re.escape(clear) + r"(tpumem: [^\r\n]*)?", "", shown)
    said = [
        line.strip() for line in text.splitlines() if re.fullmatch(r"(out|err) \d+", line.strip())
    ]
    assert said == [f"{k} {i}" for i in range(30) for k in ("out", "err")]


NEVER_A_TRACE = ["/dev/zero", "/dev/null", "/dev/urandom", "/proc/self/mem"]


def _tpumem(*args: str, **given) -> subprocess.CompletedProcess[str]:
    """`python -m tpumem ARGS` in a fresh process, ended after 60 s: what these
    tests refuse used to wait for ever."""
    command = [sys.executable, "-m", "tpumem", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, **given)


def test_watch_refuses_what_never_is_a_trace_by_reports_rule(tmp_path):
    """A FIFO, a device, /proc's files, standard input, and links to them: one line
    at once, the one report says, where watch waited for ever."""
    import os

    fifo = tmp_path / "run.tpumem"
    os.mkfifo(fifo)
    (tmp_path / "to-zero.tpumem").symlink_to("/dev/zero")
    (tmp_path / "to-fifo.tpumem").symlink_to(fifo)
    paths = [*NEVER_A_TRACE, str(fifo), str(tmp_path / "to-zero.tpumem")]
    for path in [*paths, str(tmp_path / "to-fifo.tpumem")]:
        watched = _tpumem("watch", path)
        line = assert_one_line_error(watched, path, "not a regular file")
        assert _tpumem("report", path).stderr.strip() == line
    piped = _tpumem("watch", "/dev/stdin", input="")  # (a pipe)
    assert_one_line_error(piped, "/dev/stdin: not a regular file, so not a trace")
    # An empty file may yet be a trace (profile made it; its run has not imported
    # the framework yet): it is waited for, as a name not there yet is.
    empty = tmp_path / "empty.tpumem"
    empty.touch()
    waiting = subprocess.Popen([sys.executable, "-m", "tpumem", "watch", str(empty)])
    try:
        time.sleep(2)
        assert waiting.poll() is None
    finally:
        waiting.kill()
        waiting.wait()


def test_watch_of_a_batch_claiming_a_terabyte_reads_up_to_it(tmp_path):
    """A record batch whose message says its body is 1 TiB: watch holds only what
    the file gives, and ends as report reads it, with the damage named."""
    from hostile_traces import cases

    trace = cases()["batch claims a terabyte"](tmp_path / "huge.tpumem")
    before = trace.read_bytes()
    watched = _tpumem("watch", str(trace))
    assert watched.returncode == 0, watched.stderr
    assert watched.stderr == ""
    assert (
        f"the run ended (closed by its writer; {trace} is damaged after its first 0 rows, "
        "read up to there)" in watched.stdout.splitlines()[-1]
    )
    reported = _tpumem("report", str(trace), "-f", "json")
    assert "damaged after its first 0 rows" in " ".join(json.loads(reported.stdout)["warnings"])
    assert trace.read_bytes() == before


def test_watch_of_every_hand_built_hostile_trace_ends_in_a_line_or_one_error(tmp_path):
    """tests/hostile_traces.py's corpus (report's, in test_fuzz.py) through watch."""
    from fuzzing import Campaign
    from hostile_traces import cases

    jobs = []
    for number, (name, make) in enumerate(cases().items()):
        path = make(tmp_path / f"hostile-{number}.tpumem")
        jobs.append((str(path), name, ["watch", str(path)]))
    outcomes = Campaign().run(jobs)
    failures = [o for o in outcomes if o.verdict not in ("report", "refused")]
    assert not failures, "\n\n".join(f"{f.verdict}: {f.how}\n{f.detail}" for f in failures[:5])
    assert len(outcomes) == len(jobs)


LIVE_WRITER = """
import sys, time
from pathlib import Path
from tpumem.trace.writer import TraceWriter

path, done = Path(sys.argv[1]), Path(sys.argv[2])
with TraceWriter(path, {"framework": "jax"}, flush_interval_s=0) as writer:
    writer.alloc(time_ns=1, device="GPU:0", buffer_id=1, bytes=4096, op="x")
    writer.flush()
    print("written", flush=True)
    while not done.exists():
        time.sleep(0.05)
"""


def test_a_live_trace_deleted_under_watch_is_said_deleted(tmp_path):
    trace, done = tmp_path / "live.tpumem", tmp_path / "done"
    command = [sys.executable, "-c", LIVE_WRITER, str(trace), str(done)]
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "written\n"
        watch = subprocess.Popen(
            [sys.executable, "-m", "tpumem", "watch", str(trace), "--interval", "0.1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(2)  # (it follows the run)
        trace.unlink()
        done.touch()
        out, err = watch.communicate(timeout=60)
    finally:
        done.touch()
        writer.wait(timeout=60)
    result = subprocess.CompletedProcess(watch.args, watch.returncode, out, err)
    assert_one_line_error(result, f"{trace}: deleted while it was watched")
