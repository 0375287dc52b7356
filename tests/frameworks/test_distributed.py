"""Distributed runs, each process under `tpumem profile` as its launcher starts it:
real jax.distributed, MultiWorkerMirroredStrategy and torchrun processes on
127.0.0.1, each process's trace named by its rank, and the run read as one."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from run_summaries import assert_summaries_stand_for_the_traces

from conftest import run_tpumem
from tpumem.trace.reader import load
from xprof_runner import xprof_memory_profile

MiB = 1024 * 1024
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}
WAIT_S = 240  # every process of a run is waited for this long, then killed


def _free_ports(count: int) -> list[int]:
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def _launch(commands: list[list[str]], cwd: Path, envs: list[dict]) -> list[tuple[int, str]]:
    """Starts every process at once (as a launcher does), waits for all of them,
    kills what is left at the end; (exit status, output) of each."""
    processes = [
        subprocess.Popen(
            command,
            cwd=cwd,
            env={**os.environ, **QUIET, **env},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for command, env in zip(commands, envs, strict=True)
    ]
    results = []
    try:
        for process in processes:
            output, _ = process.communicate(timeout=WAIT_S)
            results.append((process.returncode, output))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return results


# Each process holds its shard of a sharded array and of the jitted function's
# output (4 MiB each), and keeps KEEP_MiB * (rank + 1) of its own; it writes what
# its own arrays hold on its device at the end, for the test to compare.
JAX_DISTRIBUTED = textwrap.dedent(
    """
    import json, sys
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    port, rank, keep_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=rank)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()), ("x",))
    sharding = NamedSharding(mesh, PartitionSpec("x"))
    shard = 1024 * 1024  # float32: 4 MiB a process
    x = jax.make_array_from_callback(
        (2 * shard,), sharding, lambda index: np.ones((shard,), np.float32)
    )
    y = jax.jit(lambda a: a * 2)(x)
    keep = jnp.zeros(keep_mib * (rank + 1) * 1024 * 1024 // 4, jnp.float32)
    keep.block_until_ready()
    # Every buffer this process's arrays hold, once (an array and its shards share one).
    buffers = {}
    for array in jax.live_arrays():
        for part in array.addressable_shards:
            buffers[part.data.unsafe_buffer_pointer()] = part.data.nbytes
    devices = [d.local_hardware_id for d in jax.local_devices()]  # this host's numbers
    json.dump({"bytes": sum(buffers.values()), "devices": devices}, open(f"held-{rank}.json", "w"))
    """
)


def _jax_run(tmp_path: Path, keep_mib: int, name: str = "run") -> Path:
    (tmp_path / "shards.py").write_text(JAX_DISTRIBUTED)
    (port,) = _free_ports(1)
    pattern = name + "/{host}-{rank}.tpumem"
    tpumem = [sys.executable, "-m", "tpumem", "profile", "-q", "-o", pattern]
    commands = [[*tpumem, "shards.py", str(port), str(rank), str(keep_mib)] for rank in (0, 1)]
    for code, output in _launch(commands, tmp_path, [{}, {}]):
        assert code == 0, output[-3000:]
    return tmp_path / name


def test_jax_distributed_processes_each_trace_their_shard_and_read_as_one_run(tmp_path):
    """The adapter waits for the script's jax.distributed.initialize(): each
    process's trace is named by its rank, holds its own shard's bytes and what it
    kept, and the run's report lists both ranks, naming the one that keeps more."""
    run = _jax_run(tmp_path, keep_mib=8)
    traces = sorted(run.glob("*.tpumem"))
    assert [t.name.rsplit("-", 1)[-1] for t in traces] == ["0.tpumem", "1.tpumem"]
    run_ids = set()
    for rank, trace in enumerate(traces):
        loaded = load(trace)
        meta = loaded.metadata
        assert (meta.process.index, meta.process.count) == (rank, 2)
        assert meta.process.source == "jax.process_index()"
        run_ids.add(meta.run)
        held = json.loads((tmp_path / f"held-{rank}.json").read_text())
        assert [d.name for d in meta.devices] == [f"CPU:{i}" for i in held["devices"]]
        report = json.loads(run_tpumem("report", str(trace), "-f", "json").stdout)
        (device,) = report["devices"]
        # The shards (4 + 4 MiB) and what the process kept, 8 MiB x (rank + 1).
        assert held["bytes"] == 8 * MiB + 8 * MiB * (rank + 1)
        # At the peak also jnp.zeros' scalar (4 B), live while it was broadcast.
        assert device["peak"]["bytes"] == held["bytes"] + 4
    assert len(run_ids) == 1 and None not in run_ids  # agreed through JAX's coordinator
    # Each process's `tpumem profile` left its summary: the run reads as it would
    # from the traces alone.
    assert_summaries_stand_for_the_traces(run, tmp_path / "bare")

    result = run_tpumem("report", str(run), "-f", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [p["index"] for p in report["processes"]] == [0, 1]
    assert report["run_ids"] == list(run_ids)
    peak = next(s for s in report["spread"] if s["figure"] == "peak")
    assert peak["difference"] == 8 * MiB
    assert peak["highest_process"] == str(traces[1])
    assert report["busiest"] == str(traces[1])
    text = run_tpumem("report", str(run)).stdout
    assert "rank 1 peaks highest: 8.0 MiB more than rank 0" in text

    assert run_tpumem("check", str(run), "--max-imbalance", "8MiB").returncode == 0
    failed = run_tpumem("check", str(run), "--max-imbalance", "7MiB")
    assert failed.returncode == 1
    assert "rank 1 peaks at 24.0 MiB, 8.0 MiB (33.3%) over rank 0's 16.0 MiB" in failed.stderr

    # A second run keeps 1 MiB more a rank: diff pairs the processes by rank, and
    # compares in full the pair of the later run's busiest process.
    later = _jax_run(tmp_path, keep_mib=9, name="later")
    result = run_tpumem("diff", str(run), str(later), "-f", "json")
    assert result.returncode == 0, result.stderr
    diff = json.loads(result.stdout)
    assert [(p["process"], p["after"] - p["before"]) for p in diff["processes"]] == [
        ("rank 0", 1 * MiB),
        ("rank 1", 2 * MiB),
    ]
    assert Path(diff["before"]).parent.name == "run" and diff["before"].endswith("-1.tpumem")
    assert Path(diff["after"]).parent.name == "later" and diff["after"].endswith("-1.tpumem")
    (device,) = diff["devices"]
    assert device["figures"]["peak"]["after"] - device["figures"]["peak"]["before"] == 2 * MiB
    compared = run_tpumem("compare", str(run), str(later), "--format", "json")
    assert compared.returncode == 0, compared.stderr
    assert "run (2 processes) stands for its busiest, rank 1" in compared.stderr


# A replicated variable (4 MiB on each worker) and a step that reduces across the
# workers; each worker keeps KEEP_MiB * (task + 1) of its own.
TF_WORKERS = textwrap.dedent(
    """
    import json, os, sys
    import tensorflow as tf

    keep_mib, steps = int(sys.argv[1]), int(sys.argv[2])
    if "WORKER_CONFIG" in os.environ:  # a script that sets TF_CONFIG itself
        os.environ["TF_CONFIG"] = os.environ.pop("WORKER_CONFIG")
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    with strategy.scope():
        weights = tf.Variable(tf.ones([1024 * 1024]))
    keep = tf.zeros([keep_mib * (task + 1) * 256 * 1024])

    @tf.function
    def step():
        def replica():
            return tf.reduce_sum(weights * 2.0)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica), axis=None)

    for _ in range(steps):
        total = float(step())
    print(json.dumps({"task": task, "sum": total}))
    """
)


def _spread(report: dict, figure: str) -> dict:
    return next(s for s in report["spread"] if s["figure"] == figure)


# What a process that died of a signal exits with under tpumem profile (the
# script's status, as a shell reports it): SIGSEGV and SIGABRT.
_CRASHED = (128 + 11, 128 + 6, -11, -6)


def _tf_workers(tmp_path: Path, steps: int, variable: str = "TF_CONFIG") -> list[tuple[int, str]]:
    """Two MultiWorkerMirroredStrategy workers under tpumem profile, TF_CONFIG on
    loopback ports as a launcher sets it. Two TensorFlow workers over gRPC on a
    loaded 2-core machine fail now and then on their own side (a port free when
    picked taken before TensorFlow binds it, a peer's socket closed mid-collective):
    up to five times, on new ports each, the failures in the test's output. A worker
    that crashed (SIGSEGV, SIGABRT) is never tried again: it fails the test."""
    (tmp_path / "workers.py").write_text(TF_WORKERS)
    tpumem = [sys.executable, "-m", "tpumem", "profile", "-q", "-o", "run/{host}-{rank}.tpumem"]
    for attempt in range(5):
        ports = _free_ports(2)
        cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
        envs = [
            {variable: json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})}
            for i in (0, 1)
        ]
        results = _launch([[*tpumem, "workers.py", "8", str(steps)]] * 2, tmp_path, envs)
        codes = [code for code, _ in results]
        assert not set(codes) & set(_CRASHED), "\n---\n".join(o[-3000:] for _, o in results)
        if all(code == 0 for code in codes):
            break
        print(f"attempt {attempt + 1}: workers exited {codes}")
        shutil.rmtree(tmp_path / "run", ignore_errors=True)
    return results


def test_tensorflow_multi_worker_runs_never_crash_under_profile(tmp_path):
    """TensorFlow's own profiler corrupts its memory when it records allocations
    while a multi-worker run's collectives run: tf.profiler.experimental alone
    ended 4 of 12 two-worker runs with SIGSEGV or SIGABRT (in ProfilerSession's
    export, TraceMeRecorder::Consume), none with host_tracer_level=1 or when the
    session began after the collectives; under tpumem profile a worker died in 2
    of 6 runs of twenty steps. So in a multi-worker run tpumem records the
    allocators' counters and no profiler session (and ends its sessions where a
    script sets TF_CONFIG itself, once TensorFlow is imported): six runs of
    twenty steps, every worker exits 0, and each trace says why it holds no
    allocation events."""
    for round_ in range(6):
        work = tmp_path / f"round-{round_}"
        work.mkdir()
        variable = "TF_CONFIG" if round_ % 2 == 0 else "WORKER_CONFIG"
        for code, output in _tf_workers(work, steps=20, variable=variable):
            assert code == 0, output[-3000:]
    meta = load(next((tmp_path / "round-0" / "run").glob("*.tpumem"))).metadata
    assert meta.fidelity == {"CPU:0": "counter"}
    assert any("in a multi-worker run" in line for line in meta.not_exposed or ())
    meta = load(next((tmp_path / "round-1" / "run").glob("*.tpumem"))).metadata
    assert any("enabled collectives" in line for line in meta.not_exposed or ())


def test_tensorflow_multi_worker_processes_read_as_one_run(tmp_path):
    """Two MultiWorkerMirroredStrategy workers: each names its trace by its task,
    and the run's report finds the worker that keeps 8 MiB more, from the
    allocators' own counters."""
    results = _tf_workers(tmp_path, steps=1)
    for code, output in results:
        assert code == 0, "\n---\n".join(out[-3000:] for _, out in results)
        assert '"sum": 4194304.0' in output  # the cross-worker reduce ran
    traces = sorted((tmp_path / "run").glob("*.tpumem"))
    run_ids = set()
    for task, trace in enumerate(traces):
        meta = load(trace).metadata
        process = meta.process
        assert (process.index, process.count, process.source) == (task, 2, "TF_CONFIG")
        run_ids.add(meta.run)
    assert len(run_ids) == 1 and None not in run_ids  # agreed through the coordination service
    assert_summaries_stand_for_the_traces(tmp_path / "run", tmp_path / "bare")
    result = run_tpumem("report", str(tmp_path / "run"), "-f", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert [p["index"] for p in report["processes"]] == [0, 1]
    peak = _spread(report, "peak")
    # The replicated variable and the step's product are alike on both: the
    # difference is what worker 1 keeps over worker 0.
    assert peak["difference"] == 8 * MiB
    assert peak["highest_process"] == str(traces[1])
    for process in report["processes"]:
        assert process["peak_bytes"] >= 4 * MiB + 8 * MiB * (process["index"] + 1)

    # The run's directory exports as one run, a host file per process (both on this
    # host: named by rank), each read by XProf's own converter at its process's peak.
    logdir = tmp_path / "tb"
    exported = run_tpumem("export", "tensorboard", str(tmp_path / "run"), "--logdir", str(logdir))
    assert exported.returncode == 0, exported.stderr
    profiles = sorted((logdir / "plugins" / "profile" / "run").glob("*.xplane.pb"))
    host = load(traces[0]).metadata.host
    assert [p.name for p in profiles] == [f"{host}-0.xplane.pb", f"{host}-1.xplane.pb"]
    converted = xprof_memory_profile(*profiles)
    peaks = [converted[str(p)]["CPU:0"]["peak"] for p in profiles]
    assert peaks == [p["peak_bytes"] for p in report["processes"]]


# Each torchrun process has a CPU device of its own (PJRT_DEVICE=CPU): 4 MiB of
# weights, and KEEP_MiB * (rank + 1) kept.
XLA_RANKS = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch_xla

    keep_mib = int(sys.argv[1])
    rank = int(os.environ["RANK"])
    device = torch_xla.device()
    weights = torch.ones(1024 * 1024, device=device)
    keep = torch.zeros(keep_mib * (rank + 1) * 256 * 1024, device=device)
    torch_xla.sync()
    print(json.dumps({"rank": rank, "sum": float(weights.sum().cpu())}))
    """
)


def test_torchrun_processes_of_pytorch_xla_read_as_one_run(tmp_path):
    """torch.distributed.run starting `tpumem profile` in each of two processes:
    traces named by torchrun's RANK, the run id torchrun's, the rank that keeps
    8 MiB more named. (torch_xla.launch on the CPU runs one process with a thread
    per device: docs/distributed.md.)"""
    (tmp_path / "ranks.py").write_text(XLA_RANKS)
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    tpumem = ["-m", "tpumem", "profile", "-q", "-o", "run/{host}-{rank}.tpumem"]
    command = [*torchrun, "--nproc_per_node", "2", *tpumem, "ranks.py", "8"]
    ((code, output),) = _launch([command], tmp_path, [{"PJRT_DEVICE": "CPU"}])
    assert code == 0, output[-3000:]
    traces = sorted((tmp_path / "run").glob("*.tpumem"))
    assert len(traces) == 2
    metadata = [load(trace).metadata for trace in traces]
    assert [(m.process.index, m.process.count) for m in metadata] == [(0, 2), (1, 2)]
    assert {m.process.source for m in metadata} == {"RANK"}
    assert len({m.run for m in metadata}) == 1 and metadata[0].run.startswith("torchrun:")
    assert_summaries_stand_for_the_traces(tmp_path / "run", tmp_path / "bare")
    report = json.loads(run_tpumem("report", str(tmp_path / "run"), "-f", "json").stdout)
    peak = _spread(report, "peak")
    assert peak["difference"] == 8 * MiB
    assert peak["highest_process"] == str(traces[1])
    for process in report["processes"]:
        assert process["peak_bytes"] >= 4 * MiB + 8 * MiB * (process["index"] + 1)
