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
from tpumem.analysis.padding import LayoutPadding
from tpumem.analysis.preallocation import Preallocation
from tpumem.hlo import refusals
from tpumem.trace.memory_settings import MemorySettings

if TYPE_CHECKING:
    from tpumem.analysis.compiled.tpu import TpuTarget


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
    # of the run's programs for a topology (`--tpu`, analysis/compiled/tpu.py).
    compiled_for: str | None = None
    # XLA:TPU refused a kernel for its on-chip VMEM: the HBM need is not known.
    refused_for_vmem: bool = False


@dataclass(frozen=True, slots=True)
class FitAdvice:
    device: str  # the run's device that needs the most
    peak_bytes: int
    headroom_bytes: int | None
    headroom_label: str
    padding_bytes: int | None  # added for TPU targets
    padding_label: str
    rows: tuple[FitRow, ...]
    notes: tuple[FitNote, ...]


# What the fit advice notes (each worded by the reports: report/fit_rows.py).
RAN_OUT = "ran out"  # the run failed on `device`: it needs at least `bytes`
MODELED_NEED = "modeled need"  # the allocator model holds it on `device` in `bytes`
ABOVE_DEFAULT = "above default"  # `setting` past its `default` is needed on `accelerator`
NO_HEADROOM = "no headroom"  # no fragmentation figure at the peak: headroom not counted
PADDING_BEYOND = "padding beyond"  # `bytes` live at the peak are no array's: not padded
PADDING_INCLUDED = "padding included"  # recorded on a TPU: sizes hold the padding
NO_SHAPES = "no shapes"  # no shapes and dtypes: the padding is not counted
PADDING_LARGE = "padding large"  # the `padding` estimate is out of proportion
TPU_COMPILED = "tpu compiled"  # `target`'s TPU generation answered by XLA:TPU's compile


@dataclass(frozen=True, slots=True)
class FitNote:
    kind: str  # one of the kinds above
    device: str | None = None
    bytes: int | None = None
    setting: str | None = None
    default: float | None = None
    accelerator: str | None = None
    padding: LayoutPadding | None = None
    target: TpuTarget | None = None


def headroom(peak_bytes: int, frag: Fragmentation, pre: Preallocation) -> tuple[int | None, str]:
    """Fragmentation headroom at the peak, and how it was obtained."""
    if frag.at_peak is None or pre.pool_at_peak_bytes is None:
        return None, provenance.NOT_AVAILABLE
    free = max(0, pre.pool_at_peak_bytes - peak_bytes)
    return round(frag.at_peak * free), frag.label


def setting_for(
    settings: MemorySettings | None, target: Accelerator, needed: int
) -> tuple[str | None, FitNote | None]:
    """(setting, note): the smallest preallocation that holds `needed` on a GPU,
    in the setting the run's framework declared (the trace's memory_settings)."""
    if target.kind != "gpu":
        return None, None  # TPU runtimes hand a program the whole chip
    fraction = math.ceil(needed / target.memory_bytes * 100) / 100
    if settings is not None and settings.limit_mib_setting is not None:
        mib = -(-needed // (1 << 20))
        return f"{settings.limit_mib_setting}={mib} (MiB)", None
    if settings is not None and settings.fraction_function is not None:
        return f"{settings.fraction_function}({fraction:.2f})", None
    if settings is None or settings.fraction_variable is None:
        return f"fraction {fraction:.2f}", None
    name, default = settings.fraction_variable, settings.default_fraction
    note = None
    if default is not None and fraction > default:
        note = FitNote(ABOVE_DEFAULT, setting=name, default=default, accelerator=target.name)
    return f"{name}={fraction:.2f}", note


def with_tpu_compiles(fit: FitAdvice | None, targets: tuple[TpuTarget, ...]) -> FitAdvice | None:
    """The fit table with each TPU generation the run was compiled for answered
    from XLA:TPU's compile (a TpuTarget's fit: its need against XLA:TPU's own
    budget for a chip), the estimate kept elsewhere. A run with no allocation
    (a script that only compiled its programs) gets those rows alone."""
    answered = [t for t in targets if t.fit is not None]
    if fit is None:
        if not answered:
            return None
        fit = FitAdvice(
            device="",
            peak_bytes=0,
            headroom_bytes=None,
            headroom_label=provenance.NOT_AVAILABLE,
            padding_bytes=None,
            padding_label=provenance.NOT_AVAILABLE,
            rows=(),
            notes=(),
        )
    rows, notes = list(fit.rows), list(fit.notes)
    for target in answered:
        tpu = target.fit
        assert tpu is not None
        row = FitRow(
            accelerator=f"TPU {target.generation}",
            kind="tpu",
            memory_bytes=tpu.usable_bytes,
            needed_bytes=tpu.need_bytes,
            fits=tpu.fits,
            share=tpu.share,
            setting=None,
            source=_budget_source(target),
            compiled_for=target.topology,
            refused_for_vmem=any(
                r.name == tpu.refused and r.refusal.space == refusals.VMEM for r in target.refused
            ),
        )
        # The generation's estimate gives way to the first slice of it compiled
        # (the model's smallest capacity is not XLA:TPU's answer: not kept);
        # every other slice of it is a row of its own (v5e:1x1 beside v5e-8).
        same = [
            i
            for i, r in enumerate(rows)
            if r.accelerator == row.accelerator and r.compiled_for is None
        ]
        if same:
            rows[same[0]] = row
        else:
            rows.append(row)
        notes.append(FitNote(TPU_COMPILED, target=target))
    return replace(fit, rows=tuple(rows), notes=tuple(notes))


def _budget_source(target: TpuTarget) -> str:
    if target.budget is not None:
        return f"XLA:TPU's limit per chip (libtpu {target.budget.libtpu or 'of unknown release'})"
    sheet = next((a for a in ACCELERATORS if a.name == f"TPU {target.generation}"), None)
    return sheet.source if sheet is not None else provenance.DATASHEET


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
    rows: list[FitRow] = []
    notes: list[FitNote] = []
    floor = floors.get(name)
    if floor is not None:
        notes.append(FitNote(RAN_OUT, device=name, bytes=floor))
    modeled_need = (smallest or {}).get(name)
    if modeled_need is not None:
        notes.append(FitNote(MODELED_NEED, device=name, bytes=modeled_need))
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
        notes.append(FitNote(NO_HEADROOM))
    if padding.beyond_bytes:
        notes.append(FitNote(PADDING_BEYOND, bytes=padding.beyond_bytes))
    if padding.included:
        notes.append(FitNote(PADDING_INCLUDED))
    elif padding.extra_bytes is None and not padding.beyond_bytes:
        notes.append(FitNote(NO_SHAPES))
    elif padding.large:
        notes.append(FitNote(PADDING_LARGE, padding=padding))
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
