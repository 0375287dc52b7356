"""A run killed by SIGKILL with its memory near what the machine allows: the
report opens with "possibly the OOM killer", and says no more than that. The rule
on hand-built endings; a real kill under `tpumem profile` records the figures the
rule reads (this machine's kernel is not made to kill here: the kill is the
script's own, far below the limit, and the report does not call it an OOM)."""

from __future__ import annotations

import json

import pytest

from conftest import run_tpumem
from profiling import profile
from sample_traces import buffer_rows
from tpumem.trace.metadata import ExitStatus

GiB = 1 << 30


def _report(make_trace, ending: ExitStatus) -> dict:
    trace = make_trace(buffer_rows(), {"exit": ending, "backend": "cpu"})
    result = run_tpumem("report", str(trace), "-f", "json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_kill_near_the_limit_is_possibly_the_oom_killer(make_trace):
    near = ExitStatus(
        signal=9, signal_name="SIGKILL", max_rss_bytes=int(7.9 * GiB), memory_limit_bytes=8 * GiB
    )
    (oom,) = _report(make_trace, near)["out_of_memory"]
    assert oom["phase"] == "killed" and "possibly the OOM killer" in oom["message"]
    assert (oom["in_use_bytes"], oom["limit_bytes"]) == (int(7.9 * GiB), 8 * GiB)
    assert oom["live"]  # what the capture last saw live
    trace = make_trace(buffer_rows(), {"exit": near, "backend": "cpu"}, name="near.tpumem")
    text = run_tpumem("report", str(trace), "--width", "300").stdout.splitlines()
    assert text[1].startswith("Out of memory  killed by SIGKILL: possibly the OOM killer")
    fit = _report(make_trace, near)["fit"]
    assert not any(
        "ran out of memory" in note for note in fit["notes"]
    )  # the host's, not the device's


def test_the_control_groups_own_count_is_enough(make_trace):
    counted = ExitStatus(
        signal=9, signal_name="SIGKILL", max_rss_bytes=GiB, memory_limit_bytes=64 * GiB, oom_kills=1
    )
    (oom,) = _report(make_trace, counted)["out_of_memory"]
    assert "the control group's OOM killer killed during the run" in oom["message"]


@pytest.mark.parametrize(
    "ending",
    [
        ExitStatus(signal=9, signal_name="SIGKILL", max_rss_bytes=GiB, memory_limit_bytes=8 * GiB),
        ExitStatus(
            signal=15, signal_name="SIGTERM", max_rss_bytes=8 * GiB, memory_limit_bytes=8 * GiB
        ),
        ExitStatus(signal=9, signal_name="SIGKILL"),  # nothing known of its memory
    ],
)
def test_other_kills_are_not_called_out_of_memory(make_trace, ending):
    assert _report(make_trace, ending)["out_of_memory"] == []


def test_a_real_kill_records_the_processs_memory_and_the_limit(tmp_path):
    (tmp_path / "killed.py").write_text(
        "import os, signal\n"
        "import jax.numpy as jnp\n"
        "x = jnp.ones((64 * 1024 * 1024,), jnp.float32).block_until_ready()  # 256 MiB\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    result = profile(tmp_path, "-o", "killed.tpumem", "killed.py")
    assert result.returncode == 128 + 9, result.stderr[-3000:]
    report = json.loads(run_tpumem("report", str(tmp_path / "killed.tpumem"), "-f", "json").stdout)
    ending = report["metadata"]["exit"]
    assert ending["max_rss_bytes"] >= 256 << 20
    assert ending["memory_limit_bytes"] >= 1 * GiB  # the machine's, or its control group's
    assert ending.get("oom_kills") in (0, None)  # 0 where the control group says
    assert report["out_of_memory"] == []  # far below the limit: not called an OOM
