"""Would it fit: the fit advice in words, for every format (text, markdown, the
page and the comparison)."""

from __future__ import annotations

from tpumem.analysis.advisor import FitAdvice, FitRow
from tpumem.units import format_bytes

# What "Would it fit?" weighs, and what its setting is: every format's words.
FIT_NEEDED = "peak + fragmentation headroom (+ TPU padding on TPUs)"


FIT_EXPLANATION = (
    "Needed = peak in use + fragmentation headroom (free bytes at the peak outside the "
    "largest free block) + the TPU layout padding estimate on TPUs. Setting: the smallest "
    "preallocation that still holds it on that GPU."
)


def fit_title(device: str | None = None) -> str:
    """The fit table's title: of one run's device, or of runs side by side."""
    return f"Would it fit? {device}: {FIT_NEEDED}" if device else f"Would it fit? {FIT_NEEDED}"


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
            f"{row.accelerator} ({format_bytes(row.memory_bytes)})",
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
    answer = f"{verdict}, {row.share:.1%} ({format_bytes(row.needed_bytes)})"
    if row.compiled_for:
        return f"{answer}: compiled for {row.compiled_for} by XLA:TPU, per chip"
    return answer + (" (estimate)" if row.kind == "tpu" else "")
