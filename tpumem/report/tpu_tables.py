"""The run's programs as XLA:TPU compiled them for a topology (`--tpu`), as rows
every format shows."""

from __future__ import annotations

import math
import os

from tpumem.analysis.compiled.cpu_forms import CpuForm
from tpumem.analysis.compiled.programs import short_program_name
from tpumem.analysis.compiled.tpu import TpuTarget
from tpumem.hlo.refusals import VMEM
from tpumem.report.fit_rows import budget_words
from tpumem.report.kind_words import kinds_rows
from tpumem.report.program_rows import MORE_ON_A_TPU, TOP_PROGRAMS, buffer_rows
from tpumem.units import counted, format_bytes

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

# A refused program's need, as XLA:TPU says it ({}).
REFUSED_NEED = "{} (refused)"


def tpu_title(target: TpuTarget, limit: int | None = TOP_PROGRAMS) -> str:
    """The section's title; `limit`: the programs listed (None: all)."""
    count = len(target.programs) + len(target.failed) + len(target.refused)
    shown = len(target.programs) if limit is None else min(len(target.programs), limit)
    more = f", the {shown} largest shown" if len(target.programs) > shown else ""
    kind = f" ({target.device_kind})" if target.device_kind else ""
    reused = (
        f" ({target.reused} of them compiled earlier in the sweep, read back)"
        if target.reused
        else ""
    )
    return (
        f"On {target.topology}{kind}: {counted(count, 'program')} compiled "
        f"by XLA:TPU ahead of time in {target.seconds:.1f} s{reused}, per chip{more}"
    )


def tpu_verdict(target: TpuTarget) -> str | None:
    """The answer for the slice, first: fits or not, by how much, against what."""
    tpu = target.fit
    if tpu is None:
        return None
    spare = tpu.spare_bytes
    share = abs(tpu.share - 1)  # of what a chip may hold: to spare, or over
    if tpu.refused:
        refused = next(r for r in target.refused if r.name == tpu.refused)
        figures = refused.refusal
        needed = format_bytes(figures.needed.bytes, 2) if figures.needed else "more"
        allowed = (
            format_bytes(figures.available.bytes, 2) if figures.available else "what it allows"
        )
        over = f": over by {format_bytes(figures.over.bytes, 2)}" if figures.over else ""
        more = f" ({len(target.refused) - 1:,} more refused)" if len(target.refused) > 1 else ""
        if figures.space == VMEM:
            return (
                f"DOES NOT FIT on {target.topology}: XLA:TPU refused "
                f"{short_program_name(refused.name)}{more}: a kernel's blocks need {needed} of "
                f"the {allowed} of on-chip VMEM{over}, XLA:TPU's own figures: its blocks must "
                "be smaller (a Pallas BlockSpec's block shape)"
            )
        return (
            f"DOES NOT FIT on {target.topology}: XLA:TPU refused "
            f"{short_program_name(refused.name)}{more}: it needs {needed} of the {allowed} a "
            f"chip may hold{over} ({share:.1%}), XLA:TPU's own figures"
        )
    words = budget_words(target)
    if tpu.not_compiled:
        programs = counted(tpu.not_compiled, "program")
        return (
            f"NOT KNOWN on {target.topology}: {programs} did not compile for it (below); "
            f"those that did need {format_bytes(tpu.need_bytes, 2)} a chip; {words}"
        )
    if tpu.fits:
        return (
            f"FITS on {target.topology}: a chip needs {format_bytes(tpu.need_bytes, 2)}, "
            f"{format_bytes(spare, 2)} ({share:.1%}) to spare; {words}{_one_chip(target)}"
        )
    return (
        f"DOES NOT FIT on {target.topology}: a chip needs {format_bytes(tpu.need_bytes, 2)}, "
        f"over by {format_bytes(-spare, 2)} ({share:.1%}); {words}{_one_chip(target)}"
    )


def _one_chip(target: TpuTarget) -> str:
    """Where the slice has several chips and its largest program runs on one: the
    figure is one chip's of a slice the step does not use (nothing shards it)."""
    chips = math.prod(int(d) for d in target.topology.split(":")[-1].split("x"))
    largest = target.programs[0] if target.programs else None
    if largest is None or chips < 2 or largest.compile.partitions != 1:
        return ""
    return (
        f". {short_program_name(largest.name)} runs on 1 of the slice's {chips} chips: "
        "nothing shards it (a jax.sharding.Mesh with NamedSharding on its inputs, or "
        "pjit's in_shardings), so the others sit idle and one holds it all"
    )


def tpu_program_rows(target: TpuTarget, limit: int = TOP_PROGRAMS) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for refused in target.refused:
        # What XLA:TPU said it needs; its plan was never made, so no more.
        needed = refused.refusal.needed
        rows.append(
            (
                short_program_name(refused.name),
                str(refused.compile.partitions),
                REFUSED_NEED.format(format_bytes(needed.bytes) if needed else "-"),
                *["-"] * (len(TPU_HEADERS) - 3),
            )
        )
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
        f"{short_program_name(failed.module)}: not compiled for {target.topology}: "
        f"{_first_line(failed.error)}"
        for failed in target.failed
    ]
    notes += [
        f"{short_program_name(refused.name)}: XLA:TPU refused it for {target.topology}, "
        f"in its words:\n{refused.message}"
        for refused in target.refused
    ]
    notes += _cpu_form_notes(target)
    unsimulated = [
        short_program_name(p.name)
        for p in target.programs
        if p.heap is not None and not p.heap.has_heap_trace
    ]
    if unsimulated:
        named = ", ".join(unsimulated[:3]) + (
            f" and {len(unsimulated) - 3:,} more" if len(unsimulated) > 3 else ""
        )
        notes.append(
            f"XLA:TPU's dump holds no HBM heap simulation for {named}: their "
            "temporaries count as their whole allocation"
        )
    return notes


def chip_kind_rows(target: TpuTarget) -> tuple[str, list[tuple[str, ...]]] | None:
    """A chip's need by kind (KIND_HEADERS), with its title; None where XLA:TPU
    made no plan of the program counted."""
    fit = target.fit
    if fit is None or not fit.kinds or fit.program is None:
        return None
    told = (
        "the kinds this run gave its arrays"
        if fit.running_at_peak
        else "its arguments' kinds from the script's objects"
    )
    title = (
        f"One chip of {target.topology} by kind: {format_bytes(fit.need_bytes)}, "
        f"XLA:TPU's plan of {short_program_name(fit.program)} with {told}"
    )
    return title, list(kinds_rows(fit.kinds, fit.need_bytes))


def tpu_peak_rows(target: TpuTarget) -> tuple[str, list[tuple[str, ...]]] | None:
    """The largest program's buffers at its peak in the TPU plan, with its title:
    where the slice refused a program, that program's in its diagnostic plan."""
    refused = next((r for r in target.refused if r.heap is not None), None)
    if refused is not None and refused.heap is not None:
        title = (
            f"{short_program_name(refused.name)}, refused on {target.topology}: what fills "
            f"it, as XLA:TPU plans it for {refused.diagnostic} (a diagnostic compile on "
            f"larger chips, not {target.topology}'s own plan): "
            f"{format_bytes(refused.heap.peak_bytes)} at its peak; largest first"
        )
        return title, buffer_rows(refused.heap, more=MORE_ON_A_TPU)
    top = next((p for p in target.programs if p.heap is not None), None)
    if top is None or top.heap is None:
        return None
    # (The program's own peak: a chip's need adds what the run holds beside it.)
    title = (
        f"{short_program_name(top.name)} on {target.topology}: "
        f"{format_bytes(top.heap.peak_bytes)} at the program's own peak (a chip's need "
        f"adds the arrays held beside it), {format_bytes(top.padding_bytes)} of it TPU "
        "layout padding; largest first"
    )
    return title, buffer_rows(top.heap, more=MORE_ON_A_TPU)


def _cpu_form_notes(target: TpuTarget) -> list[str]:
    """One note a program: what of it is the CPU's form, where."""
    by_program: dict[tuple[int | None, str], list[CpuForm]] = {}
    for form in target.cpu_forms:
        by_program.setdefault((form.program_id, form.program), []).append(form)
    notes = []
    for (_, program), forms in by_program.items():
        said = []
        for form in forms:
            where = ", ".join(os.path.basename(s) for s in form.sources)
            said.append(f"{form.what} ({where})" if where else form.what)
        notes.append(
            f"{short_program_name(program)}: lowered for the CPU and compiled for "
            f"{target.topology} as it is: {'; '.join(said)}; the TPU's lowering may differ "
            "there (tpumem fit lowers a JAX script for the slice)"
        )
    return notes


def _first_line(error: str | None) -> str:
    return (error or "").strip().partition("\n")[0]
