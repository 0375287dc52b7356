"""`tpumem fit --sweep`: the answer at each combination of the swept arguments'
values, on each slice, and the first argument's largest value that fits for
each combination of the others (the frontier)."""

from __future__ import annotations

from tpumem.analysis.compiled.sweep import SweepPoint, largest
from tpumem.units import format_bytes


def sweep_cell(point: SweepPoint, topology: str) -> str:
    """One combination's answer on one slice, per chip."""
    if topology in point.skipped:
        return f"not compiled: {point.skipped[topology]}"
    target = point.found.get(topology)
    fit = target.fit if target is not None else None
    if target is None or fit is None:
        return "no program compiled"
    if fit.not_compiled:
        return f"not known: {fit.not_compiled:,} did not compile"
    need = f"{format_bytes(fit.need_bytes, 2)} ({fit.share:.1%})"
    if fit.refused:
        return f"does not fit: refused, {need}"
    return f"{'fits' if fit.fits else 'does not fit'}: {need}"


def sweep_table(
    names: tuple[str, ...], slices: list[str], points: list[SweepPoint]
) -> tuple[str, tuple[str, ...], list[tuple[str, ...]]]:
    """(title, headers, a row per combination): each slice's answer per chip."""
    title = f"{' x '.join(f'--{n}' for n in names)}: a chip's need, compiled by XLA:TPU"
    rows = [(*p.values, *(sweep_cell(p, s) for s in slices)) for p in points]
    return title, (*names, *slices), rows


def sweep_largest(names: tuple[str, ...], slices: list[str], points: list[SweepPoint]) -> list[str]:
    """One swept argument: the largest value that fits each slice, in words."""
    lines = []
    for topology in slices:
        best, _ = largest(points, topology)
        if best is not None:
            lines.append(f"{topology}: the largest --{names[0]} that fits is {best.values[0]}")
        else:
            lines.append(f"{topology}: no value of --{names[0]} given fits")
    return lines


def frontier_table(
    names: tuple[str, ...], slices: list[str], points: list[SweepPoint]
) -> tuple[str, tuple[str, ...], list[tuple[str, ...]]]:
    """Several swept arguments: per combination of all but the first, each
    slice's largest first value that fits, with its need per chip, and the next
    value, which does not."""
    groups: dict[tuple[str, ...], list[SweepPoint]] = {}
    for point in points:
        groups.setdefault(point.values[1:], []).append(point)
    rows = []
    for rest, group in groups.items():
        cells = []
        for topology in slices:
            best, above = largest(group, topology)
            if best is None:
                cells.append("none given fits")
                continue
            fit = best.found[topology].fit
            assert fit is not None
            cell = f"{best.values[0]} ({format_bytes(fit.need_bytes, 2)})"
            cells.append(f"{cell}; {above} does not fit" if above else f"{cell}, the largest given")
        rows.append((*rest, *cells))
    title = f"Largest --{names[0]} that fits, per " + ", ".join(f"--{n}" for n in names[1:])
    return title, (*names[1:], *slices), rows
