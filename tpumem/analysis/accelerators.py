"""Accelerators the fit advisor weighs a run against: memory per chip, with the
page each figure comes from. Google's TPU pages mean GiB (the v5p page says so:
96 GiB physical, 95 GiB left to programs). A GPU's is what CUDA gives PyTorch
(`torch.cuda.get_device_properties(0).total_memory`), a little less than its
datasheet's and nvidia-smi's: the H200's as CUDA reported it on one (recorded in
tests/data/torch_cuda; its page's 141 GB is more), the others as PyTorch's
out-of-memory message prints it ("GPU 0 has a total capacity of 79.10 GiB", to
0.01 GiB: within 5 MiB) in public threads about those GPUs. What a program can
use is a little less on every one: the runtime and, on GPUs, the CUDA context
keep some (gpus.py)."""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30
_OOM_MESSAGE = "CUDA's total, as PyTorch's out-of-memory message prints it (to 0.01 GiB)"


@dataclass(frozen=True, slots=True)
class Accelerator:
    name: str
    kind: str  # "tpu" or "gpu"
    memory_bytes: int  # per chip
    source: str


ACCELERATORS: tuple[Accelerator, ...] = (
    Accelerator("TPU v4", "tpu", 32 * GiB, "https://cloud.google.com/tpu/docs/v4"),
    Accelerator("TPU v5e", "tpu", 16 * GiB, "https://cloud.google.com/tpu/docs/v5e"),
    Accelerator("TPU v5p", "tpu", 95 * GiB, "https://cloud.google.com/tpu/docs/v5p"),
    Accelerator("TPU v6e", "tpu", 32 * GiB, "https://cloud.google.com/tpu/docs/v6e"),
    Accelerator("A100 40GB", "gpu", round(39.38 * GiB), _OOM_MESSAGE),
    Accelerator("A100 80GB", "gpu", round(79.15 * GiB), _OOM_MESSAGE),
    Accelerator("H100 80GB", "gpu", round(79.10 * GiB), _OOM_MESSAGE),
    Accelerator("H200", "gpu", 150_109_880_320, "torch.cuda.get_device_properties(0).total_memory"),
)
