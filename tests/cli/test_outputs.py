"""Nothing a user made is lost or overwritten without their say, and faults during
`tpumem profile` (a full disk, a killed tpumem, a forked child) keep the script's
exit status and what was recorded. Through the real CLI (tpumem/outputs.py)."""

from __future__ import annotations

import gzip
import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

from conftest import assert_one_line_error, run_tpumem
from profiling import QUIET, profile
from tpumem.trace.amend import _message_ends
from tpumem.trace.metadata import ExitStatus
from tpumem.trace.reader import load
from tpumem.trace.writer import TraceWriter

XPLANE = Path(__file__).parent.parent / "data" / "xplane" / "tf_cpu.xplane.pb"
TRACE = Path(__file__).parent.parent / "data" / "gpu" / "mlp.tpumem"
RUN = Path(__file__).parent.parent / "data" / "gpu" / "run"
DEMO = Path(__file__).parent.parent / "data" / "demo"

JAX_SCRIPT = """
import os, sys, time
import jax.numpy as jnp
kept = [jnp.ones((64, 64)) * i for i in range(int(os.environ.get("ARRAYS", "4")))]
if os.environ.get("FORK"):
    child = os.fork()
    if child == 0:
        sys.exit(3)  # a forked worker ending its own way
    os.waitpid(child, 0)
    later = [jnp.ones((32, 32)) for _ in range(5)]
if os.environ.get("WAIT"):
    open("pid", "w").write(str(os.getpid()))
    time.sleep(120)
print("done")
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(JAX_SCRIPT)
    return path


def test_profile_refuses_to_write_over_its_script(tmp_path, script):
    result = run_tpumem("profile", "-o", "train.py", "train.py", cwd=tmp_path)
    assert_one_line_error(result, "train.py: is an input")
    assert script.read_text() == JAX_SCRIPT
    result = run_tpumem("profile", "--force", "-o", "train.py", "train.py", cwd=tmp_path)
    assert_one_line_error(result, "train.py: is an input")
    assert script.read_text() == JAX_SCRIPT


def test_fit_refuses_to_write_over_its_script_before_it_runs(tmp_path):
    """`fit -o train.py train.py` wrote its trace over the script, --force or not,
    however -o spells it: refused as profile refuses it (one rule, paths compared
    by what they name), before anything is compiled or the script runs."""
    script = tmp_path / "train.py"
    source = "open('ran', 'w').write('the script ran')\n"
    script.write_text(source)
    for output in (
        "train.py",
        "./train.py",
        str(script),
        f"{tmp_path}/../{tmp_path.name}/train.py",
    ):
        for force in ([], ["--force"]):
            result = run_tpumem(
                "fit", "--tpu", "v5e-8", *force, "-o", output, "train.py", cwd=tmp_path
            )
            assert_one_line_error(result, "is an input of this command")
            assert script.read_text() == source
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]  # it never ran


def test_report_and_import_refuse_to_write_over_their_input(tmp_path):
    trace = tmp_path / "t.tpumem"
    trace.write_bytes(TRACE.read_bytes())
    xplane = tmp_path / "host.xplane.pb"
    xplane.write_bytes(XPLANE.read_bytes())
    for args in (
        ["report", str(trace), "-o", str(trace)],
        ["report", str(trace), "-o", str(trace), "--force"],
        ["import", str(xplane), "-o", str(xplane)],
        ["import", str(xplane), "-o", str(xplane), "--force"],
    ):
        assert_one_line_error(run_tpumem(*args), "is an input of this command")
    assert trace.read_bytes() == TRACE.read_bytes()
    assert xplane.read_bytes() == XPLANE.read_bytes()


def test_an_existing_trace_is_replaced_only_with_force(tmp_path, script):
    existing = tmp_path / "run.tpumem"
    existing.write_bytes(TRACE.read_bytes())
    for args in (
        ["import", str(XPLANE), "-o", str(existing)],
        ["profile", "-o", str(existing), str(script)],
    ):
        result = run_tpumem(*args, cwd=tmp_path)
        assert result.returncode == 2 and "Traceback" not in result.stderr
    assert existing.read_bytes() == TRACE.read_bytes()
    # A report refuses a trace as its output too.
    result = run_tpumem("report", str(TRACE), "-o", str(existing))
    assert_one_line_error(result, "is a tpumem trace", "--force")
    assert existing.read_bytes() == TRACE.read_bytes()

    result = run_tpumem("import", str(XPLANE), "-o", str(existing), "--force")
    assert result.returncode == 0, result.stderr
    assert load(existing).metadata.source == "import"
    result = profile(tmp_path, "-q", "--force", "-o", str(existing), str(script))
    assert result.returncode == 0, result.stderr
    assert load(existing).metadata.source == "tpumem profile"


def test_default_names_are_numbered_not_replaced(tmp_path, script):
    first = run_tpumem("import", str(XPLANE), cwd=tmp_path)
    second = run_tpumem("import", str(XPLANE), cwd=tmp_path)
    assert first.returncode == second.returncode == 0, second.stderr
    assert first.stdout.startswith("tf_cpu.tpumem: ")
    assert second.stdout.startswith("tf_cpu-2.tpumem: ")
    for _ in range(2):
        result = profile(tmp_path, "-q", "train.py")
        assert result.returncode == 0, result.stderr
    assert load(tmp_path / "train.tpumem").complete
    assert load(tmp_path / "train-2.tpumem").complete
    assert not (tmp_path / "train-3.tpumem").exists()


def test_a_summary_replaces_only_a_summary_of_tpumems(tmp_path):
    """`import prof.xplane.pb -o results` destroyed the user's results.summary.json
    (the name of the summary beside a trace named `results`): it stays, byte for
    byte, and one line says no summary was written; the trace stands, exit 0. A
    summary of tpumem's own there is replaced; a link there is left a link."""
    mine = tmp_path / "results.summary.json"
    mine.write_text('{"accuracy": 0.93}\n')
    for force in ([], ["--force"]):
        result = run_tpumem("import", str(XPLANE), "-o", "results", *force, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        (line,) = [line for line in result.stderr.splitlines() if "summary" in line]
        assert line == (
            "tpumem: no summary written beside results: results.summary.json is there and is "
            "not a summary of tpumem's; left as it is"
        )
        assert "Traceback" not in result.stderr
        assert mine.read_text() == '{"accuracy": 0.93}\n'
        assert load(tmp_path / "results").metadata.source == "import"
    # Its own summary beside a trace is replaced with the trace (--force).
    result = run_tpumem("import", str(XPLANE), "-o", "t.tpumem", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    own = tmp_path / "t.tpumem.summary.json"
    assert own.read_text().startswith('{"format":"tpumem-summary"')
    made = own.stat().st_mtime_ns
    result = run_tpumem("import", str(XPLANE), "-o", "t.tpumem", "--force", cwd=tmp_path)
    assert result.returncode == 0 and "summary" not in result.stderr, result.stderr
    assert own.stat().st_mtime_ns != made
    # A link where the summary would go: the user's, left as it is.
    (tmp_path / "linked.tpumem.summary.json").symlink_to(mine)
    result = run_tpumem("import", str(XPLANE), "-o", "linked.tpumem", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "no summary written beside linked.tpumem" in result.stderr
    assert (tmp_path / "linked.tpumem.summary.json").readlink() == mine
    assert mine.read_text() == '{"accuracy": 0.93}\n'


def test_profile_leaves_the_users_file_where_its_summary_would_go(tmp_path, script):
    """`profile -o metrics` destroyed the user's metrics.summary.json: it stays, one
    line says no summary was written, and the run's exit status is the script's."""
    mine = tmp_path / "metrics.summary.json"
    mine.write_text('{"loss": [0.9, 0.5]}\n')
    result = profile(tmp_path, "-q", "-o", "metrics", "train.py")
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    assert (
        "tpumem: no summary written beside metrics: metrics.summary.json is there and is not "
        "a summary of tpumem's; left as it is"
    ) in result.stderr.splitlines()
    assert mine.read_text() == '{"loss": [0.9, 0.5]}\n'
    assert load(tmp_path / "metrics").complete


def test_a_report_replaces_an_earlier_report_whole_or_not_at_all(tmp_path):
    page = tmp_path / "r.md"
    assert run_tpumem("report", str(TRACE), "-o", str(page)).returncode == 0
    earlier = page.read_text()
    result = _limited(2000, "report", str(TRACE), "-o", str(page), "-f", "json")
    assert_one_line_error(result, "cannot write")
    assert page.read_text() == earlier
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.md"]  # no temporary left
    result = run_tpumem("report", str(TRACE), "-o", str(page), "-f", "json")
    assert result.returncode == 0, result.stderr
    assert page.read_text().startswith('{\n  "schema": "tpumem-report/1"')


def test_a_report_replaces_only_what_tpumem_wrote_unless_forced(tmp_path):
    """`report -o` onto a script, a profile or the user's notes changes nothing and
    says so in one line; --force replaces it; an empty file is replaced."""
    script = tmp_path / "train.py"
    script.write_text("import tpumem  # a report of tpumem's? no: a script\n")
    profile = tmp_path / "host.xplane.pb"
    profile.write_bytes(XPLANE.read_bytes())
    notes = tmp_path / "notes.md"
    notes.write_text("# my notes\n")
    for target in (script, profile, notes):
        before = target.read_bytes()
        result = run_tpumem("report", str(TRACE), "-o", str(target))
        assert_one_line_error(result, str(target), "not a report of tpumem's", "--force")
        assert target.read_bytes() == before
    result = run_tpumem("report", str(TRACE), "-o", str(notes), "--force")
    assert result.returncode == 0, result.stderr
    assert notes.read_text().startswith("# tpumem report")
    empty = tmp_path / "empty.txt"
    empty.touch()
    assert run_tpumem("report", str(TRACE), "-o", str(empty)).returncode == 0


def test_every_report_and_page_tpumem_writes_is_known_as_its_own(tmp_path):
    """Each command's output in each format is one `report -o` replaces without
    --force (outputs.is_report): a report, a run's, a program's, a comparison, a
    diff."""
    from tpumem.outputs import is_report

    demo = tmp_path / "jax.tpumem"
    demo.write_bytes(gzip.decompress((DEMO / "jax_transformer.tpumem.gz").read_bytes()))
    report = json.loads(run_tpumem("report", str(demo), "-f", "json").stdout)
    program = report["programs"][0]["name"]
    commands = {
        "report": ["report", str(TRACE)],
        "run": ["report", str(RUN)],
        "program": ["report", str(demo), "--program", program],
        "diff": ["diff", str(TRACE), str(demo)],
    }
    for name, command in commands.items():
        for fmt in ("text", "json", "md", "html"):
            out = tmp_path / f"{name}-{fmt}.out"
            result = run_tpumem(*command, "-f", fmt, "-o", str(out))
            assert result.returncode == 0, (name, fmt, result.stderr)
            assert is_report(out), (name, fmt, out.read_bytes()[:200])
    page = tmp_path / "compare.html"  # (compare writes only its page to a file)
    result = run_tpumem("compare", str(TRACE), str(demo), "--html", str(page))
    assert result.returncode == 0, result.stderr
    assert is_report(page), page.read_bytes()[:200]


def test_tpu_compiles_are_added_only_to_a_whole_trace(tmp_path):
    """`report --tpu` keeps XLA:TPU's answers in the trace. A trace damaged part
    way, or cut, is left byte for byte as it was (before, the rows after the
    damage were cut off and the compiles appended); the report still comes."""
    whole = tmp_path / "whole.tpumem"
    with TraceWriter(whole, {"framework": "jax"}, flush_interval_s=0) as writer:
        for step in range(4):
            writer.alloc(time_ns=step, device="TPU:0", buffer_id=step, bytes=64, op=f"op{step}")
            writer.flush()
    data = whole.read_bytes()
    ends = _message_ends(pa.py_buffer(data))
    damaged = tmp_path / "damaged.tpumem"  # a message in the middle overwritten
    damaged.write_bytes(data[: ends[2]] + b"\x00" * 16 + data[ends[2] + 16 :])
    cut = tmp_path / "cut.tpumem"
    cut.write_bytes(data[: ends[-1]])  # its writer never closed it
    for trace in (damaged, cut):
        before = trace.read_bytes()
        result = run_tpumem("report", str(trace), "--tpu", "v5e:1x1")
        assert result.returncode == 0, result.stderr
        assert "tpumem report" in result.stdout
        assert "nothing added, nothing changed" in result.stderr
        assert trace.read_bytes() == before


def _limited(size: int, *args: str, cwd: Path | None = None, env: dict | None = None):
    """`tpumem ARGS` with its files limited to `size` bytes, as a full disk limits
    them (Python ignores SIGXFSZ, so a write past the limit fails with EFBIG)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return subprocess.run(
        [sys.executable, "-m", "tpumem", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **QUIET, **(env or {})},
        preexec_fn=limit,
        timeout=300,
    )


def test_a_full_disk_keeps_the_scripts_status_and_what_was_written(tmp_path, script):
    result = _limited(
        60_000, "profile", "-q", "-o", "t.tpumem", "train.py", cwd=tmp_path, env={"ARRAYS": "400"}
    )
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("tpumem")]
    assert len(lines) == 1 and "the trace stopped early" in lines[0], result.stderr
    trace = load(tmp_path / "t.tpumem")
    assert trace.table.num_rows > 0
    assert (tmp_path / "t.tpumem").stat().st_size <= 60_000


def test_a_forked_child_leaves_the_parents_trace_alone(tmp_path, script):
    result = profile(tmp_path, "-q", "-o", "t.tpumem", "train.py", env={"FORK": "1"})
    assert result.returncode == 0, result.stderr
    trace = load(tmp_path / "t.tpumem")
    assert trace.complete
    assert trace.metadata.exit == ExitStatus(code=0)  # the parent's, not the child's 3
    shapes = trace.table.column("shape").to_pylist()
    assert shapes.count("[32,32]") >= 5  # made after the child exited


def _gone(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in status  # dead, not yet reaped by whoever adopted it


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGHUP, signal.SIGTERM])
def test_the_script_does_not_outlive_tpumem(tmp_path, script, how):
    parent = subprocess.Popen(
        [sys.executable, "-m", "tpumem", "profile", "-q", "-o", "t.tpumem", "train.py"],
        cwd=tmp_path,
        env={**os.environ, **QUIET, "WAIT": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # A suite run under nohup would hand its SIGHUP ignored down to the script,
        # which then rightly outlives a hangup: the test is of a hangup that ends it.
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    pid_file = tmp_path / "pid"
    deadline = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text():
        assert parent.poll() is None and time.monotonic() < deadline, parent.stderr.read()
        time.sleep(0.1)
    child = int(pid_file.read_text())
    parent.send_signal(how)
    parent.wait(timeout=60)
    deadline = time.monotonic() + 20
    while not _gone(child):
        assert time.monotonic() < deadline, f"the script outlived tpumem ({how.name})"
        time.sleep(0.1)
    trace = load(tmp_path / "t.tpumem")
    assert trace.table.num_rows > 0
    if how != signal.SIGKILL:  # tpumem passed the signal on and recorded the ending
        assert parent.returncode == 128 + how
        assert trace.metadata.exit.signal_name == how.name


def test_output_paths_that_are_not_files(tmp_path):
    (tmp_path / "adir").mkdir()
    for target, words, report_words in (
        ("adir", "is a directory", "is a directory"),
        ("missing/t.tpumem", "no such directory", "no such directory"),
        # (a report is written to a device as it is: this one is always full)
        ("/dev/full", "not a regular file", "No space left on device"),
    ):
        result = run_tpumem("import", str(XPLANE), "-o", target, cwd=tmp_path)
        assert_one_line_error(result, words)
        result = run_tpumem("report", str(TRACE), "-o", target, cwd=tmp_path)
        assert_one_line_error(result, report_words)
    assert Path("/dev/full").is_char_device()


def test_an_output_that_is_a_link_is_written_through_and_stays_a_link(tmp_path):
    """Every -o was written beside its path and renamed onto it, so a link given
    as -o became a regular file and what it named was left as it was: now the
    file it names is written (renamed onto there), and the link stays."""
    (tmp_path / "elsewhere").mkdir()
    earlier = tmp_path / "elsewhere" / "r.md"
    earlier.write_text("# tpumem report · an earlier one\n")
    link = tmp_path / "r.md"
    link.symlink_to(earlier)
    result = run_tpumem("report", str(TRACE), "-o", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and link.readlink() == earlier
    assert earlier.read_text().startswith(f"# tpumem report: {TRACE}")
    assert sorted(p.name for p in earlier.parent.iterdir()) == ["r.md"]  # no temporary left
    # A link to the user's notes: refused as the notes would be, both left as they are.
    notes = tmp_path / "elsewhere" / "notes.md"
    notes.write_text("# my notes\n")
    to_notes = tmp_path / "notes.md"
    to_notes.symlink_to(notes)
    assert_one_line_error(run_tpumem("report", str(TRACE), "-o", str(to_notes)), "--force")
    assert to_notes.readlink() == notes and notes.read_text() == "# my notes\n"
    # A link to a file not made yet: made there, where the link points.
    ahead = tmp_path / "ahead.json"
    ahead.symlink_to(tmp_path / "elsewhere" / "new.json")
    result = run_tpumem("report", str(TRACE), "-o", str(ahead))
    assert result.returncode == 0, result.stderr
    assert ahead.is_symlink() and json.loads(ahead.read_text())["schema"] == "tpumem-report/1"
    # A trace through a link: replaced only with --force, the link kept.
    trace = tmp_path / "elsewhere" / "t.tpumem"
    trace.write_bytes(TRACE.read_bytes())
    to_trace = tmp_path / "t.tpumem"
    to_trace.symlink_to(trace)
    assert_one_line_error(run_tpumem("import", str(XPLANE), "-o", str(to_trace)), "--force")
    assert trace.read_bytes() == TRACE.read_bytes()
    result = run_tpumem("import", str(XPLANE), "-o", str(to_trace), "--force")
    assert result.returncode == 0, result.stderr
    assert to_trace.is_symlink() and load(trace).metadata.source == "import"
    made = tmp_path / "made.tpumem"
    made.symlink_to(tmp_path / "elsewhere" / "made.tpumem")
    result = run_tpumem("import", str(XPLANE), "-o", str(made))
    assert result.returncode == 0, result.stderr
    assert made.is_symlink() and load(made.readlink()).metadata.source == "import"


def test_a_report_to_a_pipe_or_a_device_is_written_to_it_never_replaced(tmp_path):
    """`report -o /dev/stdout > out.json` left out.json empty and made the
    machine's /dev/stdout a regular file: a FIFO or a device is written to as it
    is, a link to one as well; `-o -` is standard output."""
    import threading

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "to-fifo"
    link.symlink_to(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()), daemon=True)
    reader.start()
    result = run_tpumem("report", str(TRACE), "-o", str(link), "-f", "md")
    assert result.returncode == 0, result.stderr
    reader.join(timeout=60)
    assert read and read[0].startswith(b"# tpumem report")
    assert fifo.is_fifo() and link.is_symlink()
    # A link to a file, as /dev/stdout is to what the shell gave it: the file gets
    # the report (the rule's case in a directory of the test's own, first).
    out = tmp_path / "out.json"
    stdout_link = tmp_path / "stdout"
    stdout_link.symlink_to(out)
    out.touch()
    result = run_tpumem("report", str(TRACE), "-o", str(stdout_link), "-f", "json")
    assert result.returncode == 0, result.stderr
    assert stdout_link.is_symlink() and json.loads(out.read_text())["schema"] == "tpumem-report/1"
    assert os.lstat("/dev/stdout").st_mode & 0o170000 == 0o120000  # a link, as it came
    with open(tmp_path / "shell.json", "w") as shell_out:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tpumem",
                "report",
                str(TRACE),
                "-o",
                "/dev/stdout",
                "-f",
                "json",
            ],
            stdout=shell_out,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "shell.json").read_text())["schema"] == "tpumem-report/1"
    assert os.lstat("/dev/stdout").st_mode & 0o170000 == 0o120000
    piped = subprocess.run(
        [sys.executable, "-m", "tpumem", "report", str(TRACE), "-o", "/dev/stdout", "-f", "json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout)["schema"] == "tpumem-report/1"
    assert Path("/dev/null").is_char_device()
    result = run_tpumem("report", str(TRACE), "-o", "/dev/null")
    assert result.returncode == 0, result.stderr
    assert Path("/dev/null").is_char_device()
    # `-o -`: standard output, for a report and a diff; no file named "-".
    result = run_tpumem("report", str(TRACE), "-o", "-", "-f", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["schema"] == "tpumem-report/1"
    result = run_tpumem("diff", str(TRACE), str(TRACE), "-o", "-", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("tpumem diff")
    assert not (tmp_path / "-").exists()


def test_a_report_to_a_file_the_shell_holds_open_is_added_to_it(tmp_path):
    """`report -o /dev/stdout >> log`: /dev/stdout names the shell's open log
    (through /proc/self/fd/1), which was replaced by the report, what it held
    lost; a notes file so given was refused. The report goes through the
    descriptor as the shell opened it: appended, the file the same one."""
    log = tmp_path / "log.txt"
    log.write_text("what the log held\n")
    before = log.stat().st_ino
    for output in ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"):
        with open(log, "a") as appending:
            done = subprocess.run(
                [sys.executable, "-m", "tpumem", "report", str(TRACE), "-o", output],
                stdout=appending,
                stderr=subprocess.PIPE,
                text=True,
                timeout=300,
            )
        assert done.returncode == 0, done.stderr
    text = log.read_text()
    assert text.startswith("what the log held\n") and text.count("tpumem report") == 3
    assert log.stat().st_ino == before and not log.is_symlink()


def test_standard_output_and_a_bucketless_url_are_no_trace_file(tmp_path, script):
    """`-o -` where a trace or a page is written, and `-o s3://` with no bucket
    (which wrote a local file named `s3:`): one line each, nothing written."""
    for args, words in (
        (["import", str(XPLANE), "-o", "-"], "-o -: standard output"),
        (["profile", "-o", "-", "train.py"], "-o -: standard output"),
        (["compare", str(TRACE), str(TRACE), "--html", "-"], "--html -"),
        (["report", str(TRACE), "-o", "s3://"], "s3://: no bucket named"),
        (["report", str(TRACE), "-o", "gs:/"], "gs://: no bucket named"),
        (["import", str(XPLANE), "-o", "s3://"], "s3://: no bucket named"),
        (["profile", "-o", "s3://", "train.py"], "s3://: no bucket named"),
    ):
        assert_one_line_error(run_tpumem(*args, cwd=tmp_path), words)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


def test_a_full_standard_output_is_one_line(tmp_path):
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-m", "tpumem", "report", str(TRACE), "-f", "json"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert_one_line_error(result, "No space left on device")


def test_a_device_file_is_not_a_script(tmp_path):
    assert_one_line_error(run_tpumem("profile", "/dev/zero"), "not a regular file")


@pytest.mark.parametrize(
    "args, words",
    [
        (["check", str(TRACE), "--max-peak", "9" * 400], "larger than any memory"),
        (["check", str(TRACE), "--max-peak", "١٢GiB"], "not a size"),
        (["check", str(TRACE), "--max-fragmentation", "nan"], "--max-fragmentation"),
        (["report", str(TRACE), "--width", "1000000000000"], "--width"),
        (["report", str(TRACE), "--width", "0"], "--width"),
        (["profile", "--sample-interval", "inf", "x.py"], "--sample-interval"),
        (["profile", "--chunk", "inf", "x.py"], "--chunk"),
        (["profile", "--chunk", "nan", "x.py"], "--chunk"),
        (["report"], "Missing argument"),
        (["report", str(TRACE), "--no-such-option"], "No such option"),
        (["export", "tensorboard", str(TRACE)], "--logdir"),
    ],
)
def test_bad_values_are_one_line(args, words):
    line = assert_one_line_error(run_tpumem(*args), words)
    assert len(line) < 200


def test_an_export_replaces_a_profile_only_with_force(tmp_path):
    trace = tmp_path / "run.tpumem"
    trace.write_bytes(TRACE.read_bytes())
    logdir = tmp_path / "tb"
    assert run_tpumem("export", "tensorboard", str(trace), "--logdir", str(logdir)).returncode == 0
    (xplane,) = (logdir / "plugins" / "profile" / "run").glob("*.xplane.pb")
    xplane.write_bytes(b"a profile TensorFlow wrote")
    again = run_tpumem("export", "tensorboard", str(trace), "--logdir", str(logdir))
    assert_one_line_error(again, "exists", "--force")
    assert xplane.read_bytes() == b"a profile TensorFlow wrote"
    forced = run_tpumem("export", "tensorboard", str(trace), "--logdir", str(logdir), "--force")
    assert forced.returncode == 0, forced.stderr
    assert xplane.read_bytes() != b"a profile TensorFlow wrote"


def test_an_adapter_that_fails_to_start_is_one_line_and_the_trace_says_why(tmp_path):
    """The runner tells tpumem how the run ended on a pipe: here, that its adapter
    failed as the script imported its framework (a jax it cannot hook), so the
    script went no further."""
    fake = tmp_path / "site" / "jax"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise_later = "broken on purpose"\n')
    (tmp_path / "train.py").write_text("import jax\nprint('ran')\n")
    result = subprocess.run(
        [sys.executable, "-m", "tpumem", "profile", "-o", "t.tpumem", "train.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
        timeout=120,
    )
    assert_one_line_error(result, "the jax adapter failed", "jax")
    assert "ran" not in result.stdout
    assert any("adapter failed" in w for w in load(tmp_path / "t.tpumem").warnings)


def test_an_output_named_with_a_trailing_slash_is_a_directory_not_a_file(tmp_path):
    """`-o new/` (no such directory) wrote a file named `new`: the slash names a
    directory, so it is one line and nothing is written."""
    for args in (
        ["report", str(TRACE), "-o", f"{tmp_path}/new/"],
        ["diff", str(TRACE), str(TRACE), "-o", f"{tmp_path}/new/"],
        ["import", str(XPLANE), "-o", f"{tmp_path}/new/"],
        ["compare", str(TRACE), str(TRACE), "--html", f"{tmp_path}/new/"],
    ):
        assert_one_line_error(run_tpumem(*args), "new/: names a directory; give a file name")
    assert list(tmp_path.iterdir()) == []


def test_a_run_directory_with_a_loop_of_links_still_reports(tmp_path):
    """Two links naming each other among a run's traces: the report is written
    (before: RuntimeError while checking the output against the inputs)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "a.tpumem").write_bytes(TRACE.read_bytes())
    (run / "x.tpumem").symlink_to("y.tpumem")
    (run / "y.tpumem").symlink_to("x.tpumem")
    result = run_tpumem("report", str(run), "-o", str(tmp_path / "run.html"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "run.html").read_text().startswith("<!DOCTYPE html>")


def test_a_closed_standard_output_is_one_line(tmp_path):
    """`tpumem report T >&-`: one line and exit 2 (before: AttributeError); with -o
    the report is written, as it needs no standard output."""

    def closed(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tpumem", *args],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: os.close(1),
            timeout=300,
        )

    result = closed("report", str(TRACE))
    assert result.returncode == 2
    assert result.stderr == "tpumem: error: cannot write the output: standard output is closed\n"
    result = closed("report", str(TRACE), "-o", str(tmp_path / "r.md"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r.md").read_text().startswith("# tpumem report")
