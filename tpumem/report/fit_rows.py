"""Would it fit: the fit advice in words, for every format (text, markdown, the
page and the comparison)."""

from __future__ import annotations

from tpumem.analysis import advisor
from tpumem.analysis.advisor import FitAdvice, FitNote, FitRow
from tpumem.analysis.compiled.programs import short_program_name
from tpumem.analysis.compiled.tpu import BESIDE, TpuTarget
from tpumem.analysis.padding import LayoutPadding
from tpumem.hlo.tiles import MAX_ELEMENT_BITS, MAX_ELEMENTS, MAX_RANK
from tpumem.units import format_bytes

# What "Would it fit?" weighs, and what its setting is: every format's words.
FIT_NEEDED = "peak + fragmentation headroom (+ TPU padding on TPUs)"


FIT_EXPLANATION = (
    "Needed = peak in use + fragmentation headroom (free bytes at the peak outside the "
    "largest free block) + the TPU layout padding estimate on TPUs. Setting: the smallest "
    "preallocation that still holds it on that GPU."
)


# The title of a fit table answered by XLA:TPU alone (a run that allocated nothing:
# its programs were compiled, never run).
FIT_COMPILED = "Would it fit? Each TPU slice, per chip, as XLA:TPU compiled the programs"


def fit_title(device: str | None = None) -> str:
    """The fit table's title: of one run's device ("" for a run with none, whose
    table is XLA:TPU's alone), or of runs side by side (None)."""
    if device == "":
        return FIT_COMPILED
    return f"Would it fit? {device}: {FIT_NEEDED}" if device else f"Would it fit? {FIT_NEEDED}"


def runs_fit_title(advice: list[FitAdvice | None]) -> str:
    """The fit table's title for runs side by side: XLA:TPU's alone where no run
    allocated (each device "")."""
    compiled_only = all(a is None or a.device == "" for a in advice)
    return fit_title("" if compiled_only else None)


def fit_setting(row: FitRow) -> str:
    """The smallest setting that holds the run on that accelerator."""
    return row.setting or ("- (a TPU program gets the whole chip)" if row.kind == "tpu" else "-")


def fit_capacity(row: FitRow) -> str | None:
    """The model's smallest capacity that holds the run, where one was asked about."""
    if row.smallest_capacity_bytes is None:
        return None
    return f"smallest capacity {format_bytes(row.smallest_capacity_bytes)} (modeled)"


def fit_table(fit: FitAdvice) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """(headers, a row per accelerator): its memory, the answer, the setting, and
    the model's smallest capacity where a capacity was asked about."""
    modeled = any(row.smallest_capacity_bytes is not None for row in fit.rows)
    headers = ("accelerator", "answer", "smallest setting that holds it")
    rows: list[tuple[str, ...]] = []
    for row in fit.rows:
        cells: tuple[str, ...] = (
            f"{row.accelerator} ({format_bytes(row.memory_bytes, 2 if row.compiled_for else 1)})",
            fit_answer(row),
            fit_setting(row),
        )
        if modeled:
            cells += (format_bytes(row.smallest_capacity_bytes),)
        rows.append(cells)
    return ((*headers, "smallest capacity (modeled)") if modeled else headers), rows


def fit_answer(row: FitRow) -> str:
    """One accelerator's answer: fits or not, and the share and bytes it needs."""
    verdict = "fits" if row.fits else "does not fit"
    if row.refused_for_vmem:
        return (
            f"does not fit: XLA:TPU refused a kernel's blocks for on-chip VMEM, compiled for "
            f"{row.compiled_for} (its need of the {format_bytes(row.memory_bytes, 2)} is not known)"
        )
    if row.compiled_for:
        return (
            f"{verdict}, {row.share:.1%} ({format_bytes(row.needed_bytes, 2)} of "
            f"{format_bytes(row.memory_bytes, 2)}): compiled for {row.compiled_for} by XLA:TPU, "
            "per chip, the arrays held beside the step included"
        )
    answer = f"{verdict}, {row.share:.1%} ({format_bytes(row.needed_bytes)})"
    return answer + (" (estimate)" if row.kind == "tpu" else "")


def fit_brief(fit: FitAdvice) -> str:
    """The fit table in a line: the accelerators it does not fit, with what each
    holds and what the run needs there, and how many it fits."""
    misses = [row for row in fit.rows if not row.fits]
    if not misses:
        most = max(row.needed_bytes for row in fit.rows)
        return (
            f"Would it fit? Yes, on all {len(fit.rows)} accelerators listed "
            f"({format_bytes(most)} needed at most)"
        )
    named = "; ".join(
        f"{row.accelerator} ({format_bytes(row.memory_bytes)}, needs "
        f"{format_bytes(row.needed_bytes)})"
        for row in misses
    )
    fits = len(fit.rows) - len(misses)
    return f"Would it fit? Not on {named}; fits {fits} of {len(fit.rows)} accelerators listed"


def fit_note(note: FitNote) -> str:
    """A note of the fit advice, in words."""
    if note.kind == advisor.RAN_OUT:
        return (
            f"the run ran out of memory on {note.device}: it needs at least "
            f"{format_bytes(note.bytes)} (more than the limit it failed under), and what it "
            "needs past the failure it never showed"
        )
    if note.kind == advisor.MODELED_NEED:
        return (
            f"modeled: the allocator's model holds the run on {note.device} in "
            f"{format_bytes(note.bytes)} at the least; needed counts the larger of that "
            "and the estimate"
        )
    if note.kind == advisor.ABOVE_DEFAULT:
        return (
            f"{note.setting} above its default {note.default:.2f} is needed on the "
            f"{note.accelerator}"
        )
    if note.kind == advisor.PADDING_BEYOND:
        return (
            f"TPU layout padding not estimated for {format_bytes(note.bytes)} live at the "
            f"peak: their shapes or dtypes are no array's (more than {MAX_RANK} dimensions "
            f"or 2^{MAX_ELEMENTS.bit_length() - 1} elements, or elements of 0 or more than "
            f"{MAX_ELEMENT_BITS} bits)"
        )
    if note.kind == advisor.PADDING_LARGE and note.padding is not None:
        return _large_padding(note.padding)
    if note.kind == advisor.TPU_COMPILED and note.target is not None:
        return _tpu_compiled(note.target)
    return _PLAIN[note.kind]


_PLAIN = {
    advisor.NO_HEADROOM: "fragmentation headroom not counted: no fragmentation figure at the peak",
    advisor.PADDING_INCLUDED: "recorded on a TPU: sizes already hold the TPU layout padding",
    advisor.NO_SHAPES: "TPU layout padding not counted: the trace has no shapes and dtypes",
}


def _large_padding(padding: LayoutPadding) -> str:
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


def _tpu_compiled(target: TpuTarget) -> str:
    tpu = target.fit
    assert tpu is not None  # (noted only for a target XLA:TPU answered)
    program = short_program_name(tpu.program or "")
    head = f"TPU {target.generation}: compiled for {target.topology} by XLA:TPU: "
    if tpu.refused:
        return f"{head}XLA:TPU refused {program}: it does not fit a chip ({budget_words(target)})"
    if tpu.running_at_peak:
        what = f"{program} (running at the peak)"
    elif tpu.arrays_bytes and tpu.arrays_label != BESIDE:
        what = f"{program} (the largest; none ran at the peak)"
    else:
        what = f"{program} (the largest program, with its arguments)"
    arrays = ""
    if tpu.arrays_bytes and tpu.arrays_label == BESIDE:
        arrays = (
            f", + {format_bytes(tpu.arrays_bytes)} of the script's other arrays as it called "
            f"the program ({BESIDE})"
        )
    elif tpu.arrays_bytes:
        arrays = (
            f", + {format_bytes(tpu.arrays_bytes)} of arrays live at the peak outside it "
            f"({tpu.arrays_label}, in TPU layouts)"
        )
    return (
        f"{head}{what} {format_bytes(tpu.program_bytes)} per chip with its code{arrays}; "
        f"{budget_words(target)}"
    )


def budget_words(target: TpuTarget) -> str:
    """What a chip may hold, and where that figure is from."""
    tpu = target.fit
    assert tpu is not None
    if target.budget is not None:
        release = target.budget.libtpu or "of unknown release"
        return (
            f"a chip may hold {format_bytes(tpu.usable_bytes, 2)}: XLA:TPU's own limit, "
            f"measured from libtpu {release}"
        )
    return (
        f"a chip holds {format_bytes(tpu.usable_bytes)} on the datasheet; XLA:TPU allows "
        "less (its limit was not measured for this trace: compile it again with --tpu)"
    )
