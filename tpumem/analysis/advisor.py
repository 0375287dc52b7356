"""The fit advisor: would this run fit on each accelerator of the table, and the
smallest preallocation setting that would still have held its peak.

What a chip must hold, per device of the run (the busiest decides):
  peak bytes in use
  + TPU layout padding (TPU targets only, estimated from shapes; a TPU run's own
    sizes already hold it)
  + fragmentation headroom: the free bytes of the pool at the peak that were not
    in its largest free block (fragmentation at peak x free bytes at peak), the
    holes the allocator had to step over. Counted where both figures exist.
At least, where the run failed, more than the limit it failed under; and, where a
capacity was asked about, the smallest capacity in which the BFC allocator model
holds the run (capacity.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tpumem.analysis import provenance
from tpumem.analysis.accelerators import ACCELERATORS, Accelerator
from tpumem.analysis.fragmentation import Fragmentation
from tpumem.analysis.padding import MAX_ELEMENT_BITS, MAX_ELEMENTS, MAX_RANK, LayoutPadding
from tpumem.analysis.preallocation import Preallocation
from tpumem.analysis.programs import short_program_name
from tpumem.trace.memory_settings import MemorySettings
from tpumem.units import format_bytes

if TYPE_CHECKING:
    from tpumem.analysis.tpu import TpuTarget


@dataclass(frozen=True, slots=True)
class FitRow:
    accelerator: str
    kind: str
    memory_bytes: int
    needed_bytes: int
    fits: bool
    share: float  # needed / memory
    # The smallest preallocation setting that holds the run, as the user writes it.
    setting: str | None
    source: str
    # The smallest capacity in which the BFC model holds the run (+ the padding on
    # TPUs), where a capacity was asked about (capacity.py); modeled.
    smallest_capacity_bytes: int | None = None
    # Where needed_bytes comes from: the estimate above, or XLA:TPU's own compile
    # of the run's programs for a topology (`--tpu`, analysis/tpu.py).
    compiled_for: str | None = None


@dataclass(frozen=True, slots=True)
class FitAdvice:
    device: str  # the run's device that needs the most
    peak_bytes: int
    headroom_bytes: int | None
    headroom_label: str
    padding_bytes: int | None  # added for TPU targets
    padding_label: str
    rows: tuple[FitRow, ...]
    notes: tuple[str, ...]


def headroom(peak_bytes: int, frag: Fragmentation, pre: Preallocation) -> tuple[int | None, str]:
    """Fragmentation headroom at the peak, and how it was obtained."""
    if frag.at_peak is None or pre.pool_at_peak_bytes is None:
        return None, provenance.NOT_AVAILABLE
    free = max(0, pre.pool_at_peak_bytes - peak_bytes)
    return round(frag.at_peak * free), frag.label


def setting_for(
    settings: MemorySettings | None, target: Accelerator, needed: int
) -> tuple[str | None, str | None]:
    """(setting, note): the smallest preallocation that holds `needed` on a GPU,
    in the setting the run's framework declared (the trace's memory_settings)."""
    if target.kind != "gpu":
        return None, None  # TPU runtimes hand a program the whole chip
    fraction = math.ceil(needed / target.memory_bytes * 100) / 100
    if settings is not None and settings.limit_mib_setting is not None:
        mib = -(-needed // (1 << 20))
        return f"{settings.limit_mib_setting}={mib} (MiB)", None
    if settings is None or settings.fraction_variable is None:
        return f"fraction {fraction:.2f}", None
    name, default = settings.fraction_variable, settings.default_fraction
    note = None
    if default is not None and fraction > default:
        note = f"{name} above its default {default:.2f} is needed on the {target.name}"
    return f"{name}={fraction:.2f}", note


def _large_padding_note(padding: LayoutPadding) -> str:
    """What to look at when the padding estimate is out of proportion: the
    shapes that pad most (tiny arrays, or no dimension that fills 128 lanes)."""
    extra = padding.extra_bytes or 0  # (a large estimate has one)
    share = extra / padding.counted_bytes if padding.counted_bytes else 0.0
    shapes = ", ".join(
        f"{s.count:,} x {s.shape} {s.dtype} (+{format_bytes(s.extra_bytes)})"
        for s in padding.largest
    )
    return (
        f"the TPU padding estimate (+{format_bytes(padding.extra_bytes)}) is {share:.0%} of the "
        f"bytes it was made from; the shapes that pad most: {shapes}. On a TPU, arrays whose "
        "dimensions are all far below 128, or that are many and small, waste most of their tiles"
    )


def _beyond_note(beyond_bytes: int) -> str:
    return (
        f"TPU layout padding not estimated for {format_bytes(beyond_bytes)} live at the peak: "
        f"their shapes or dtypes are no array's (more than {MAX_RANK} dimensions or "
        f"2^{MAX_ELEMENTS.bit_length() - 1} elements, or elements of 0 or more than "
        f"{MAX_ELEMENT_BITS} bits)"
    )


def with_tpu_compiles(fit: FitAdvice | None, targets: tuple[TpuTarget, ...]) -> FitAdvice | None:
    """The fit table with each TPU generation the run was compiled for answered
    from XLA:TPU's compile (a TpuTarget's fit), the estimate kept elsewhere."""
    if fit is None:
        return None
    rows, notes = list(fit.rows), list(fit.notes)
    for target in targets:
        if target.fit is None:
            continue
        wanted = f"TPU {target.generation}"
        for index, row in enumerate(rows):
            if row.accelerator != wanted:
                continue
            needed = target.fit.need_bytes
            rows[index] = replace(
                row,
                needed_bytes=needed,
                fits=needed <= row.memory_bytes,
                share=needed / row.memory_bytes,
                smallest_capacity_bytes=None,  # the model's answer is not XLA:TPU's
                compiled_for=target.topology,
            )
        tpu = target.fit
        what = "running at the peak" if tpu.running_at_peak else "the largest; none ran at the peak"
        notes.append(
            f"TPU {target.generation}: compiled for {target.topology} by XLA:TPU: "
            f"{short_program_name(tpu.program or '')} ({what}) "
            f"{format_bytes(tpu.program_bytes)} per chip with its "
            f"code, + {format_bytes(tpu.arrays_bytes)} of arrays live at the peak outside it "
            f"({tpu.arrays_label}, in TPU layouts)"
        )
    return replace(fit, rows=tuple(rows), notes=tuple(notes))


def fit_advice(
    settings: MemorySettings | None,
    devices: list[tuple[str, int, int | None, str, LayoutPadding]],
    table: tuple[Accelerator, ...] = ACCELERATORS,
    failed: dict[str, int | None] | None = None,
    smallest: dict[str, int | None] | None = None,
) -> FitAdvice | None:
    """`settings`: how the run's framework sets its pool (the trace's
    memory_settings); `devices`: (name, peak bytes, headroom bytes, headroom label, padding) each;
    `failed`: per device that ran out of memory, what it needs at the least (more
    than the limit it failed under: oom.demand_floor); `smallest`: per device, the
    smallest capacity the allocator model holds the run in."""
    if not devices:
        return None
    floors = {k: v for k, v in (failed or {}).items() if v is not None}

    def demand(d: tuple[str, int, int | None, str, LayoutPadding]) -> int:
        return max(d[1] + (d[2] or 0), floors.get(d[0], 0)) + (d[4].extra_bytes or 0)

    name, peak, room, room_label, padding = max(devices, key=demand)
    rows, notes = [], []
    floor = floors.get(name)
    if floor is not None:
        notes.append(
            f"the run ran out of memory on {name}: it needs at least {format_bytes(floor)} "
            "(more than the limit it failed under), and what it needs past the failure it "
            "never showed"
        )
    modeled_need = (smallest or {}).get(name)
    if modeled_need is not None:
        notes.append(
            f"modeled: the BFC allocator model holds the run on {name} in "
            f"{format_bytes(modeled_need)} at the least; needed counts the larger of that "
            "and the estimate"
        )
    for target in table:
        # The model replays the run; the estimate adds headroom: neither is undercut.
        needed = max(peak + (room or 0), floor or 0, modeled_need or 0)
        modeled = modeled_need
        if target.kind == "tpu":
            needed += padding.extra_bytes or 0
            modeled = None if modeled is None else modeled + (padding.extra_bytes or 0)
        setting, note = setting_for(settings, target, needed)
        if note and needed <= target.memory_bytes:
            notes.append(note)
        rows.append(
            FitRow(
                accelerator=target.name,
                kind=target.kind,
                memory_bytes=target.memory_bytes,
                needed_bytes=needed,
                fits=needed <= target.memory_bytes,
                share=needed / target.memory_bytes,
                setting=setting if needed <= target.memory_bytes else None,
                source=target.source,
                smallest_capacity_bytes=modeled,
            )
        )
    if room is None:
        notes.append("fragmentation headroom not counted: no fragmentation figure at the peak")
    if padding.beyond_bytes:
        notes.append(_beyond_note(padding.beyond_bytes))
    if padding.included:
        notes.append("recorded on a TPU: sizes already hold the TPU layout padding")
    elif padding.extra_bytes is None and not padding.beyond_bytes:
        notes.append("TPU layout padding not counted: the trace has no shapes and dtypes")
    elif padding.large:
        notes.append(_large_padding_note(padding))
    return FitAdvice(
        device=name,
        peak_bytes=peak,
        headroom_bytes=room,
        headroom_label=room_label,
        padding_bytes=padding.extra_bytes,
        padding_label=padding.label,
        rows=tuple(rows),
        notes=tuple(notes),
    )
