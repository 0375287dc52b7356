"""Bad input ends in one line on stderr and exit status 2, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from conftest import assert_one_line_error, run_tpumem
from sample_traces import buffer_rows
from tpumem.trace.schema import SCHEMA
from xspace_builder import build_space


def trace_inputs(tmp_path):
    empty = tmp_path / "empty.tpumem"
    empty.write_bytes(b"")
    noise = tmp_path / "noise.tpumem"
    noise.write_bytes(os.urandom(4096))
    text = tmp_path / "notes.txt"
    text.write_text("peak was 12 GiB\n")
    future = tmp_path / "future.tpumem"
    meta = json.dumps({"format": "tpumem-trace", "format_version": 2}).encode()
    with (
        pa.OSFile(str(future), "wb") as sink,
        pa.ipc.new_stream(sink, SCHEMA.with_metadata({b"tpumem": meta})),
    ):
        pass
    head = tmp_path / "head.tpumem"
    head.write_bytes(future.read_bytes()[:40])
    return {
        "empty": (empty, "empty"),
        "random bytes": (noise, "not a tpumem trace"),
        "text": (text, "not a tpumem trace"),
        "missing": (tmp_path / "missing.tpumem", "no such file"),
        "truncated header": (head, "truncated"),
        "future version": (future, "newer"),
        "directory": (tmp_path, "directory"),
    }


@pytest.mark.parametrize(
    "case",
    ["empty", "random bytes", "text", "missing", "truncated header", "future version", "directory"],
)
def test_report_refuses(tmp_path, case):
    path, words = trace_inputs(tmp_path)[case]
    assert_one_line_error(run_tpumem("report", str(path)), words)


@pytest.mark.parametrize("case", ["random bytes", "missing", "future version"])
def test_diff_refuses(tmp_path, make_trace, case):
    path, words = trace_inputs(tmp_path)[case]
    good = make_trace([{"kind": "alloc", "device": "CPU:0", "bytes": 1, "buffer_id": 1}])
    assert_one_line_error(run_tpumem("diff", str(good), str(path)), words)
    assert_one_line_error(run_tpumem("diff", str(path), str(good)), words)


def test_diff_and_check_refuse_bad_limits(make_trace):
    good = str(make_trace([{"kind": "alloc", "device": "CPU:0", "bytes": 1, "buffer_id": 1}]))
    assert_one_line_error(run_tpumem("diff", good, good, "--noise", "lots"), "--noise")
    assert_one_line_error(run_tpumem("diff", good, good, "-f", "pdf"), "pdf")
    assert_one_line_error(run_tpumem("check", good, "--max-growth", "1 parsec"), "--max-growth")
    assert_one_line_error(run_tpumem("check", good, "--max-increase", "5%"), "--baseline")
    result = run_tpumem("check", good, "--baseline", good, "--max-increase", "a lot%")
    assert_one_line_error(result, "--max-increase")


@pytest.mark.parametrize(
    ("option", "value", "words"),
    [
        # (Python's float and int read a full-width or Arabic-Indic digit as a digit)
        ("--max-imbalance", "\uff11%", "is not a share such as 5% (ASCII digits)"),
        ("--max-imbalance", "\u0661\u0660%", "is not a share"),
        ("--max-imbalance", "1e2%", "is not a share"),
        ("--max-peak", "\uff11\uff12GiB", "not a size"),
        # (it read as 0 B, a limit every run breaks)
        ("--max-peak", "0.5", "0.5 B is not a whole number of bytes"),
        ("--max-growth", "1.3KiB", "1.3 KiB (1,331.2 bytes) is not a whole number of bytes"),
        ("--max-peak", "1 EiB", "units B, KB, MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB"),
        ("--max-peak", "8192 PiB", "larger than any memory"),  # (2^63 bytes)
    ],
)
def test_a_size_or_share_is_ascii_digits_and_whole_bytes(make_trace, option, value, words):
    good = str(make_trace([{"kind": "alloc", "device": "CPU:0", "bytes": 1, "buffer_id": 1}]))
    line = assert_one_line_error(run_tpumem("check", good, option, value), option, words)
    assert f"Invalid value for '{option}'" in line


def test_sizes_in_the_units_the_reports_print_are_taken(make_trace):
    """A report prints up to PiB (units.format_bytes): a limit of 1 PiB or 1 PB is one."""
    good = str(make_trace([{"kind": "alloc", "device": "CPU:0", "bytes": 1, "buffer_id": 1}]))
    for limit in ("1 PiB", "1PB", "0.5 KiB", "1.5 pib"):
        result = run_tpumem("check", good, "--max-peak", limit)
        assert result.returncode == 0, result.stderr
        assert "within the limits" in result.stdout


def test_import_of_an_xplane_without_memory_events_says_why(tmp_path):
    xplane = tmp_path / "host.xplane.pb"
    xplane.write_bytes(build_space([{"name": "PjitFunction", "offset_ps": 1}]))
    result = run_tpumem("import", str(xplane), "-o", str(tmp_path / "out.tpumem"))
    assert_one_line_error(result, "no MemoryAllocation", "TF_CPU_ALLOCATOR_USE_BFC=true", "JAX")


def test_import_of_a_directory_without_profiles(tmp_path):
    assert_one_line_error(run_tpumem("import", str(tmp_path)), "no *.xplane.pb")


@pytest.mark.parametrize("kind", ["random", "truncated", "empty"])
def test_import_of_a_corrupt_xplane(tmp_path, kind):
    good = build_space([{"name": "MemoryAllocation", "offset_ps": 1, "stats": {"addr": 1}}])
    data = {"random": os.urandom(2048), "truncated": good[: len(good) - 7], "empty": b""}[kind]
    xplane = tmp_path / "host.xplane.pb"
    xplane.write_bytes(data)
    result = run_tpumem("import", str(xplane), "-o", str(tmp_path / "out.tpumem"))
    assert_one_line_error(result, str(xplane))


def test_import_of_a_trace_says_it_is_one_and_to_report_it(tmp_path, make_trace):
    """It said "Wire format was corrupt", reading the trace as an XSpace profile."""
    trace = make_trace([{"kind": "alloc", "device": "CPU:0", "bytes": 1, "buffer_id": 1}])
    before = trace.read_bytes()
    result = run_tpumem("import", str(trace), "-o", str(tmp_path / "out.tpumem"))
    line = assert_one_line_error(
        result, f"{trace}: a tpumem trace already", f"tpumem report {trace} reads it"
    )
    assert "Wire format" not in line
    assert trace.read_bytes() == before and not (tmp_path / "out.tpumem").exists()


def test_import_and_report_refuse_a_fifo_or_a_device_named_as_a_profile(tmp_path):
    """import of a FIFO waited for a writer for ever (a snapshot's first bytes
    were read from it); one line now, as for a device."""
    for name in ("f.xplane.pb", "f.pickle", "f"):
        os.mkfifo(tmp_path / name)
    (tmp_path / "z.xplane.pb").symlink_to("/dev/zero")
    for name in ("f.xplane.pb", "f.pickle", "f", "z.xplane.pb"):
        path = str(tmp_path / name)
        for command in ("import", "report"):
            result = subprocess.run(
                [sys.executable, "-m", "tpumem", command, path],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert_one_line_error(result, path, "not a regular file")


def test_unknown_report_format(tmp_path, make_trace):
    path = make_trace([{"kind": "alloc", "device": "CPU:0", "bytes": 1, "buffer_id": 1}])
    assert_one_line_error(run_tpumem("report", str(path), "--format", "pdf"), "pdf")


def test_profile_refuses_what_it_cannot_run(tmp_path):
    (tmp_path / "plain.py").write_text("import json\n")
    (tmp_path / "adir").mkdir()
    cases = [
        (["profile"], "no script given"),
        (["profile", "missing.py"], "missing.py: no such file"),
        (["profile", "adir"], "is a directory"),
        (["profile", "plain.py"], "imported none of the frameworks", "nothing was recorded"),
        (["profile", "--framework", "caffe", "plain.py"], "unknown framework 'caffe'"),
        (["profile", "--bogus", "plain.py"], "no such option: --bogus", "after the script"),
        (["profile", "-m", "no_such_module_here"], "no module named"),
    ]
    for args, *words in cases:
        assert_one_line_error(run_tpumem(*args, cwd=tmp_path), *words)
    assert not list(tmp_path.glob("*.tpumem"))


def test_to_pandas_without_pandas_is_one_clear_error(tmp_path, make_trace):
    path = make_trace(buffer_rows())
    script = (
        "import sys, tpumem\nfrom tpumem.errors import TpumemError\n"
        "sys.modules['pandas'] = None  # as where it is not installed\n"
        f"trace = tpumem.load({str(path)!r})\n"
        "try:\n    trace.to_pandas()\nexcept TpumemError as error:\n    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "Trace.to_pandas needs pandas, which is not installed: pip install pandas"
    )
