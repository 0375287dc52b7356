"""`tpumem profile --follow`: the processes a script starts record themselves,
each in its own trace of the run's directory (real multiprocessing, torchrun and
torch_xla.launch, every process waited for and ended by the test)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from run_summaries import assert_summaries_stand_for_the_traces

from conftest import run_tpumem
from profiling import profile
from tpumem.trace.reader import load

MiB = 1024 * 1024

# Three workers keep (index + 1) MiB each; the third is killed by SIGKILL once
# its trace has had time to take its array. With "top", the launcher imports JAX
# before it starts them (a fork then inherits it).
WORKERS = textwrap.dedent(
    """
    import multiprocessing as mp
    import os, signal, sys, time
    if "top" in sys.argv:
        import jax.numpy

    def work(index, kill):
        import jax.numpy as jnp
        kept = jnp.ones((index + 1) * 256 * 1024, jnp.float32)
        kept.block_until_ready()
        if kill:
            time.sleep(1.0)
            os.kill(os.getpid(), signal.SIGKILL)
        with open(f"worker-{index}.pid", "w") as done:  # (lines on a shared stdout can mix)
            done.write(str(os.getpid()))

    if __name__ == "__main__":
        context = mp.get_context(sys.argv[1])
        workers = [context.Process(target=work, args=(i, i == 2)) for i in range(3)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(timeout=120)
        print("exit codes", [w.exitcode for w in workers], flush=True)
    """
)


def _peak(trace: Path) -> int:
    report = json.loads(run_tpumem("report", str(trace), "-f", "json").stdout)
    return max((d["peak"]["bytes"] for d in report["devices"]), default=0)


@pytest.mark.parametrize(
    "how", [["spawn"], ["fork"], ["fork", "top"]], ids=["spawn", "fork", "fork-after-import"]
)
def test_multiprocessing_workers_each_record_and_a_killed_one_stays_readable(tmp_path, how):
    (tmp_path / "workers.py").write_text(WORKERS)
    result = profile(tmp_path, "--follow", "-o", "run", "workers.py", *how)
    assert result.returncode == 0, result.stderr[-3000:]  # the launcher's status
    assert "exit codes [0, 0, -9]" in result.stdout
    # Each worker that ended writes its pid to a file of its own (the cwd).
    pids = {int((tmp_path / f"worker-{i}.pid").read_text()): i for i in (0, 1)}
    assert not (tmp_path / "worker-2.pid").exists()
    traces = {load(t).metadata.pid: t for t in sorted((tmp_path / "run").glob("*.tpumem"))}
    killed = [pid for pid in traces if pid not in pids]
    assert len(killed) == 1  # the launcher, which started no device, has no trace
    for pid, index in pids.items():
        trace = load(traces[pid])
        assert trace.complete and trace.metadata.exit.code == 0
        assert traces[pid].name == f"{trace.metadata.host}-pid{pid}.tpumem"
        # Its array, and jnp.ones' scalar, live while it was broadcast.
        assert _peak(traces[pid]) == (index + 1) * MiB + 4
    cut_short = load(traces[killed[0]])
    assert not cut_short.complete
    assert _peak(traces[killed[0]]) == 3 * MiB + 4
    assert len({load(t).metadata.run for t in traces.values()}) == 1
    # The run reads as one: every process, the killed one among them.
    report = run_tpumem("report", str(tmp_path / "run"), "-f", "json")
    assert report.returncode == 0, report.stderr
    listed = {p["pid"]: p for p in json.loads(report.stdout)["processes"]}
    assert sorted(listed) == sorted(traces)
    assert [pid for pid, p in listed.items() if not p["complete"]] == killed


XLA_RANKS = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch_xla

    rank = int(os.environ["RANK"])
    device = torch_xla.device()
    kept = torch.zeros((rank + 1) * 256 * 1024, device=device)
    torch_xla.sync()
    print(json.dumps({"rank": rank, "pid": os.getpid()}), flush=True)
    """
)


def test_torchrun_followed_from_the_parent(tmp_path):
    """`tpumem profile --follow -m torch.distributed.run ...`: torchrun's workers,
    started as new Python processes, each record themselves under torchrun's RANK;
    torchrun itself imports torch and allocates nothing: no rank, no trace kept."""
    (tmp_path / "ranks.py").write_text(XLA_RANKS)
    result = profile(
        tmp_path,
        "--follow",
        "-o",
        "run",
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "ranks.py",
        env={"PJRT_DEVICE": "CPU"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    traces = sorted((tmp_path / "run").glob("*.tpumem"))
    assert [t.name.rsplit("-", 1)[-1] for t in traces] == ["0.tpumem", "1.tpumem"]
    for rank, trace in enumerate(traces):
        meta = load(trace).metadata
        assert (meta.process.index, meta.process.count, meta.process.source) == (rank, 2, "RANK")
        assert _peak(trace) >= (rank + 1) * MiB
    assert "2 traces written to run" in result.stderr
    assert "read in full" not in result.stderr  # (none was expected before it ended)
    # The followed processes' summaries, written from the run's own report.
    assert_summaries_stand_for_the_traces(tmp_path / "run", tmp_path / "bare")


LAUNCHED = textwrap.dedent(
    """
    import os, sys
    import torch
    import torch_xla
    import torch_xla.runtime as xr

    def work(index):
        device = torch_xla.device()
        kept = torch.zeros((xr.global_ordinal() + 1) * 256 * 1024, device=device)
        torch_xla.sync()
        # One write a line: the device threads print at once.
        sys.stdout.write(f"launched-worker {xr.global_ordinal()} {os.getpid()}\\n")
        sys.stdout.flush()

    if __name__ == "__main__":
        torch_xla.launch(work, args=())
    """
)


def test_torch_xla_launch_followed_from_the_parent(tmp_path):
    """torch_xla.launch on the CPU: one spawned worker process with a thread per
    device; its trace holds both devices' tensors."""
    (tmp_path / "launched.py").write_text(LAUNCHED)
    result = profile(
        tmp_path,
        "--follow",
        "-o",
        "run",
        "launched.py",
        env={"PJRT_DEVICE": "CPU", "CPU_NUM_DEVICES": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = re.findall(r"launched-worker (\d+) (\d+)", result.stdout)
    worker_pids = {int(pid) for _, pid in found}
    (worker,) = worker_pids
    traces = {load(t).metadata.pid: t for t in (tmp_path / "run").glob("*.tpumem")}
    # The launcher imported torch_xla but started no device: not a rank, no trace.
    assert list(traces) == [worker]
    report = json.loads(run_tpumem("report", str(traces[worker]), "-f", "json").stdout)
    peaks = {d["device"]: d["peak"]["bytes"] for d in report["devices"]}
    # (Once beside two CPU burners only CPU:0 was there: the worker's lines, and
    # what the trace holds, say which thread ran on which device if it recurs.)
    assert sorted(peaks) == ["CPU:0", "CPU:1"], (found, report["devices"])
    assert peaks["CPU:0"] >= MiB and peaks["CPU:1"] >= 2 * MiB


def test_follow_refuses_what_takes_one_trace(tmp_path):
    (tmp_path / "workers.py").write_text(WORKERS)
    for option in (["--tensorboard", "tb"], ["--framework", "jax"], ["--tpu", "v5e:1x1"]):
        result = subprocess.run(
            [sys.executable, "-m", "tpumem", "profile", "--follow", *option, "workers.py"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
        )
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr


@pytest.mark.parametrize("follow", [[], ["--follow"]], ids=["one", "follow"])
def test_a_run_that_imports_no_framework_is_an_error_followed_or_not(tmp_path, follow):
    """`profile` and `profile --follow` agree: nothing recorded is one line and exit
    status 2, or the script's own status where it failed."""
    (tmp_path / "plain.py").write_text("print('no framework here')\n")
    (tmp_path / "fails.py").write_text("import sys\nsys.exit(3)\n")
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "text": True}
    for script, status in (("plain.py", 2), ("fails.py", 3)):
        result = subprocess.run(
            [sys.executable, "-m", "tpumem", "profile", *follow, "-o", "out", script],
            cwd=tmp_path,
            timeout=120,
            **quiet,
        )
        assert result.returncode == status, result.stderr
        assert "Traceback" not in result.stderr
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith("tpumem: error: ") and "nothing was recorded" in line, line
    assert not list(tmp_path.rglob("*.tpumem"))
