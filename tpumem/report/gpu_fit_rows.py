"""`tpumem fit --gpu`: each GPU's verdict on a PyTorch run on fake tensors, and
with --sweep each value's, with how each figure was had (its tensors' bytes
exact on fake tensors, the caching allocator's segments modeled)."""

from __future__ import annotations

from tpumem.analysis.compiled.sweep import number
from tpumem.analysis.gpus import CUDA_CONTEXT_BYTES, GpuVerdict
from tpumem.units import counted, format_bytes

VERDICT_HEADERS = ("GPU", "PyTorch can have", "peak allocated", "peak reserved", "verdict")


def verdict_title(steps: int) -> str:
    ran = counted(steps, "optimizer step") if steps else "no optimizer step (see the warnings)"
    return (
        f"Will it fit? {ran} on fake tensors: allocated from PyTorch's ops (estimated), "
        "reserved from the caching allocator's model (modeled)"
    )


def verdict_cell(verdict: GpuVerdict) -> str:
    if verdict.fits:
        assert verdict.reserved_bytes is not None
        spare = verdict.usable_bytes - verdict.reserved_bytes
        return f"fits: {format_bytes(spare)} to spare"
    said = "out of memory"
    if verdict.where:
        said += f": {verdict.where}"
    if verdict.needs_bytes is not None:
        said += f"; {_needs(verdict.needs_bytes)}"
    return said


def _needs(needs_bytes: int) -> str:
    """What the run needs of PyTorch's share, and so of a GPU's memory."""
    return (
        f"needs {format_bytes(needs_bytes)} of PyTorch's (a GPU of "
        f"{format_bytes(needs_bytes + CUDA_CONTEXT_BYTES)})"
    )


def verdict_rows(verdicts: list[GpuVerdict]) -> list[tuple[str, ...]]:
    return [
        (
            v.gpu,
            format_bytes(v.usable_bytes),
            format_bytes(v.peak_bytes),
            format_bytes(v.reserved_bytes) if v.reserved_bytes is not None else "-",
            verdict_cell(v),
        )
        for v in verdicts
    ]


def context_note() -> str:
    context = format_bytes(CUDA_CONTEXT_BYTES)
    return (
        f"PyTorch can have: the GPU's memory less the CUDA context, {context} "
        "(measured on an H200, CUDA 13; other GPUs and versions differ by tens of MiB)"
    )


def sweep_rows(
    name: str, rows: list[tuple[str, list[GpuVerdict] | None]], gpus: list[str], skipped_by: str
) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """(headers, a row per value): its peak allocated, and each GPU's verdict."""
    table = []
    for value, verdicts in rows:
        if verdicts is None:
            table.append((value, "-", *(f"not run: {skipped_by}" for _ in gpus)))
            continue
        table.append(
            (
                value,
                format_bytes(verdicts[0].peak_bytes),
                *(
                    f"fits ({format_bytes(v.reserved_bytes)} reserved)"
                    if v.fits and v.reserved_bytes is not None
                    else f"out of memory; {_needs(v.needs_bytes)}"
                    if v.needs_bytes is not None
                    else "out of memory"
                    for v in verdicts
                ),
            )
        )
    gpu_headers = (f"{gpu} (reserved: modeled)" for gpu in gpus)
    return (f"--{name}", "peak allocated (estimated)", *gpu_headers), table


def sweep_largest(
    name: str, rows: list[tuple[str, list[GpuVerdict] | None]], gpus: list[str]
) -> list[str]:
    lines = []
    for index, gpu in enumerate(gpus):
        fitting = [value for value, verdicts in rows if verdicts and verdicts[index].fits]
        if fitting:
            # (the largest by number where every value is one, else the last given)
            numbers = [number(v) for v in fitting]
            if None not in numbers:
                fitting = [v for _, v in sorted(zip(numbers, fitting, strict=True))]
            lines.append(f"{gpu}: the largest --{name} that fits is {fitting[-1]}")
        else:
            lines.append(f"{gpu}: no value of --{name} given fits")
    return lines
