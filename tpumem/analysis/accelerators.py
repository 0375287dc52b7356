"""Accelerators the fit advisor weighs a run against: memory per chip, with the
page each figure comes from. Vendors write GB; Google's TPU pages mean GiB (the
v5p page says so: 96 GiB physical, 95 GiB left to programs); NVIDIA's
A100 pages mean GiB (nvidia-smi shows 40,960 and 81,920 MiB for them); an H100
80GB has 81,559 MiB (nvidia-smi, as a cloud's list of its GPUs gives it). The
H200's is what CUDA reported on one (150,109,880,320 bytes, 139.8 GiB, recorded in
tests/data/torch_cuda): its page's 141 GB is less. What a program can use is a
little less on every one: the runtime and, on GPUs, the CUDA context keep some."""

from __future__ import annotations

from dataclasses import dataclass

GiB = 1 << 30


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
    Accelerator("A100 40GB", "gpu", 40 * GiB, "https://www.nvidia.com/en-us/data-center/a100/"),
    Accelerator("A100 80GB", "gpu", 80 * GiB, "https://www.nvidia.com/en-us/data-center/a100/"),
    Accelerator(
        "H100 80GB", "gpu", 81_559 << 20, "nvidia-smi, github.com/modal-labs/modal-client/pull/2797"
    ),
    Accelerator("H200", "gpu", 150_109_880_320, "torch.cuda.get_device_properties(0).total_memory"),
)
