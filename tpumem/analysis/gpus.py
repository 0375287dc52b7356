"""The GPUs `tpumem fit --gpu` weighs a PyTorch model against: each one's memory
(accelerators.py), what of it PyTorch's caching allocator can have, and what CUDA
adds to a PyTorch run that its ops on the CPU do not show (cuBLAS's workspace).

- The CUDA context: the device memory a process holds outside PyTorch's
  allocator (the context, its kernels, cuBLAS's handles). Measured on the H200
  of the recorded snapshots (CUDA 13, torch 2.11): at its out-of-memory error,
  total - free - PyTorch's reserved bytes (tests/data/torch_cuda/oom.json).
  Other GPUs, drivers and CUDA versions differ by some tens of MiB.
- cuBLAS's workspace: PyTorch gives each cuBLAS handle and stream its own, from
  the caching allocator, kept for the process's life. Its default size
  (CUBLAS_WORKSPACE_CONFIG unset) is 32 MiB on compute capability 9 and later
  (the recorded H200 run held two: the script's thread's and autograd's
  backward thread's), 4096 KiB x 2 + 16 KiB x 8 before.
- cuBLASLt's workspace (CUBLASLT_WORKSPACE_SIZE unset: 1 MiB): the recorded
  H200 run took one at its first addmm (a Linear with a bias), kept to the end.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tpumem.analysis.accelerators import ACCELERATORS
from tpumem.errors import TpumemError
from tpumem.units import format_bytes

if TYPE_CHECKING:
    from tpumem.analysis.trace_figures import TraceAnalysis

CUDA_CONTEXT_BYTES = 150_109_880_320 - 148_854_931_456 - 467_664_896
HOPPER_WORKSPACE = 4096 * 1024 * 8
EARLIER_WORKSPACE = 4096 * 1024 * 2 + 16 * 1024 * 8
LT_WORKSPACE = 1024 * 1024

# Compute capability (major) of the GPUs accelerators.py lists.
_COMPUTE = {"A100 40GB": 8, "A100 80GB": 8, "H100 80GB": 9, "H200": 9}


@dataclass(frozen=True, slots=True)
class Gpu:
    name: str
    memory_bytes: int
    compute_major: int

    @property
    def usable_bytes(self) -> int:
        """What PyTorch's caching allocator can take: the memory less the context."""
        return self.memory_bytes - CUDA_CONTEXT_BYTES

    @property
    def workspace_bytes(self) -> int:
        return HOPPER_WORKSPACE if self.compute_major >= 9 else EARLIER_WORKSPACE


GPUS: tuple[Gpu, ...] = tuple(
    Gpu(a.name, a.memory_bytes, _COMPUTE[a.name]) for a in ACCELERATORS if a.name in _COMPUTE
)


def _key(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def gpu_named(text: str) -> Gpu:
    """The GPU a --gpu value names (H100-80GB, h100, "A100 40GB"): its name with
    or without spaces and dashes, or a prefix that names one GPU."""
    key = _key(text)
    exact = [g for g in GPUS if _key(g.name) == key]
    found = exact or ([g for g in GPUS if _key(g.name).startswith(key)] if key else [])
    if len(found) == 1:
        return found[0]
    names = ", ".join(g.name.replace(" ", "-") for g in GPUS)
    if found:
        some = ", ".join(g.name.replace(" ", "-") for g in found)
        raise TpumemError(f"--gpu {text}: which one? {some}")
    raise TpumemError(f"--gpu {text}: not a GPU tpumem knows; give one of {names}")


@dataclass(frozen=True, slots=True)
class GpuVerdict:
    gpu: str
    usable_bytes: int
    peak_bytes: int  # allocated at the peak: the tensors' own bytes (estimated)
    reserved_bytes: int | None  # the modeled segments at their most, where it fits
    fits: bool
    needs_bytes: int | None  # the smallest capacity that holds the run (modeled)
    where: str  # where it runs out: the line and what it asked for


def gpu_verdict(gpu: Gpu, analysis: TraceAnalysis) -> GpuVerdict:
    check, device = analysis.capacity[0], analysis.devices[0]
    failure = check.failure
    where = ""
    if failure is not None:
        where = f"{format_bytes(failure.requested_bytes)} asked"
        if failure.location:
            where += f" at {failure.location}"
    return GpuVerdict(
        gpu=gpu.name,
        usable_bytes=gpu.usable_bytes,
        peak_bytes=device.peak.bytes,
        reserved_bytes=(
            gpu.usable_bytes - check.headroom_bytes if check.headroom_bytes is not None else None
        ),
        fits=failure is None,
        needs_bytes=check.smallest_bytes,
        where=where,
    )
