"""Which process of a distributed run this one is, and the id its run goes by.

Launchers say it in the environment before the framework starts (torchrun's RANK,
TF_CONFIG's task, SLURM, MPI, a Cloud TPU VM's worker id); the framework says it
once it has initialised (jax.process_index(), PyTorch/XLA's process_index()), and
then the framework's word stands. The run's id: tpumem's own (TPUMEM_RUN_ID, set
for the processes `tpumem profile --follow` captures), else the launcher's job id.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Mapping

from tpumem.adapters.launch_protocol import RUN_ID_VARIABLE
from tpumem.trace.metadata import ProcessInfo

RUN_ID_KEY = "tpumem/run_id"  # in a framework's coordination service

# (rank variable, count variable) of launchers that number their processes, first match wins.
_RANKS = (
    ("RANK", "WORLD_SIZE"),  # torch.distributed.run (torchrun), torch_xla on GPU
    ("SLURM_PROCID", "SLURM_NTASKS"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI's mpirun
    ("PMI_RANK", "PMI_SIZE"),  # MPICH, Intel MPI
    ("PMIX_RANK", "PMIX_SIZE"),
)
# TensorFlow numbers a multi-worker cluster's tasks chief first, then the workers
# (multi_worker_util.id_in_cluster); parameter servers and evaluators hold no replica.
_TF_TASK_TYPES = ("chief", "worker")


def _integer(text: str | None) -> int | None:
    try:
        value = int(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and value >= 0 else None


def from_tf_config(text: str | None) -> ProcessInfo | None:
    """A TF_CONFIG's task as its index among the cluster's chief and workers."""
    try:
        config = json.loads(text) if text else {}
        cluster, task = config["cluster"], config["task"]
        kind, index = task["type"], int(task["index"])
        sizes = {name: len(cluster.get(name) or ()) for name in _TF_TASK_TYPES}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if kind not in _TF_TASK_TYPES:
        return None
    offset = sum(sizes[name] for name in _TF_TASK_TYPES[: _TF_TASK_TYPES.index(kind)])
    return ProcessInfo(offset + index, sum(sizes.values()), "TF_CONFIG")


def from_environment(environ: Mapping[str, str]) -> ProcessInfo | None:
    """What the launcher's variables say, or None where none numbers processes."""
    for rank_name, count_name in _RANKS:
        index = _integer(environ.get(rank_name))
        if index is not None:
            return ProcessInfo(index, _integer(environ.get(count_name)), rank_name)
    found = from_tf_config(environ.get("TF_CONFIG"))
    if found is not None:
        return found
    # A Cloud TPU VM: its worker id, and the slice's hosts.
    worker = _integer(environ.get("TPU_WORKER_ID") or environ.get("CLOUD_TPU_TASK_ID"))
    if worker is not None:
        hosts = environ.get("TPU_WORKER_HOSTNAMES") or ""
        count = len([h for h in hosts.split(",") if h.strip()]) or None
        return ProcessInfo(worker, count, "TPU_WORKER_ID")
    return None


def run_id_from_environment(environ: Mapping[str, str]) -> str | None:
    """tpumem's run id, or the launcher's job id, or None."""
    if environ.get(RUN_ID_VARIABLE):
        return environ[RUN_ID_VARIABLE]
    if environ.get("TORCHELASTIC_RUN_ID"):
        return f"torchrun:{environ['TORCHELASTIC_RUN_ID']}"
    if environ.get("SLURM_JOB_ID"):
        step = environ.get("SLURM_STEP_ID")
        return f"slurm:{environ['SLURM_JOB_ID']}" + (f".{step}" if step else "")
    return None


def agreed_run_id(count: int | None, agree: Callable[[str, str], str | None]) -> str | None:
    """The launcher's run id; else, for a run of several processes, the one they
    agree on through their framework's coordination service: `agree(key, mine)`
    sets the key where no process has yet and returns what it holds (the first
    process to set it wins, the others read it: nobody waits for a process that
    is not profiled), or None where there is no service."""
    found = run_id_from_environment(os.environ)
    if found is not None or count is None or count < 2:
        return found
    return agree(RUN_ID_KEY, uuid.uuid4().hex)
