"""The run's programs as XLA:TPU compiled them for a topology (`--tpu`), as rows
every format shows."""

from __future__ import annotations

from tpumem.analysis.programs import short_program_name
from tpumem.analysis.tpu import TpuTarget
from tpumem.report.program_rows import TOP_PROGRAMS, buffer_rows
from tpumem.units import format_bytes

TPU_HEADERS = (
    "program",
    "chips",
    "per chip",
    "arguments",
    "outputs",
    "aliased",
    "temps",
    "code",
    "padding at peak",
)


def tpu_title(target: TpuTarget, limit: int | None = TOP_PROGRAMS) -> str:
    """The section's title; `limit`: the programs listed (None: all)."""
    count = len(target.programs) + len(target.failed)
    shown = len(target.programs) if limit is None else min(len(target.programs), limit)
    more = f", the {shown} largest shown" if len(target.programs) > shown else ""
    kind = f" ({target.device_kind})" if target.device_kind else ""
    return (
        f"On {target.topology}{kind}: {count:,} program{'s' if count != 1 else ''} compiled "
        f"by XLA:TPU ahead of time in {target.seconds:.1f} s, per chip{more}"
    )


def tpu_program_rows(target: TpuTarget, limit: int = TOP_PROGRAMS) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for program in target.programs[:limit]:
        rows.append(
            (
                short_program_name(program.name),
                str(program.compile.partitions),
                format_bytes(program.need_bytes),
                format_bytes(program.memory("argument_bytes")),
                format_bytes(program.memory("output_bytes")),
                format_bytes(program.memory("alias_bytes")),
                format_bytes(program.temp_bytes),
                format_bytes(program.code_bytes),
                format_bytes(program.padding_bytes) if program.heap is not None else "-",
            )
        )
    return rows


def tpu_notes(target: TpuTarget) -> list[str]:
    """What did not compile, and why (what a chip needs for the run is the fit
    table's, with its note)."""
    notes = [
        f"{short_program_name(failed.module)}: not compiled for {target.topology}: {failed.error}"
        for failed in target.failed
    ]
    if any(p.heap is not None and not p.heap.has_heap_trace for p in target.programs):
        notes.append(
            "XLA:TPU's dump holds no HBM heap simulation for some programs: their "
            "temporaries count as their whole allocation"
        )
    return notes


def tpu_peak_rows(target: TpuTarget) -> tuple[str, list[tuple[str, ...]]] | None:
    """The largest program's buffers at its peak in the TPU plan, with its title."""
    top = next((p for p in target.programs if p.heap is not None), None)
    if top is None or top.heap is None:
        return None
    title = (
        f"{short_program_name(top.name)} on {target.topology}: "
        f"{format_bytes(top.heap.peak_bytes)} at its peak, "
        f"{format_bytes(top.padding_bytes)} of it TPU layout padding; largest first"
    )
    return title, buffer_rows(top.heap)
