"""`tpumem fit --sweep`: what each combination of the swept arguments' values
answered on each slice, and the rules read from those answers: which fit,
which XLA:TPU said do not, and the first argument's largest value that fits
(fit_sweep.py skips by them; report/sweep_tables.py shows them)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tpumem.analysis.compiled.tpu import TpuTarget


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One combination: its values (in the order of the --sweep options), each
    slice's answer there, and the slices it was not compiled for, with why."""

    values: tuple[str, ...]
    found: dict[str, TpuTarget]
    skipped: dict[str, str] = field(default_factory=dict)


def fits(point: SweepPoint, topology: str) -> bool:
    target = point.found.get(topology)
    return target is not None and target.fit is not None and target.fit.fits


def does_not_fit(point: SweepPoint, topology: str) -> bool:
    """XLA:TPU's answer there is no (not: not known, not compiled)."""
    target = point.found.get(topology)
    fit = target.fit if target is not None else None
    return fit is not None and not fit.fits and not fit.not_compiled


def largest(points: list[SweepPoint], topology: str) -> tuple[SweepPoint | None, str | None]:
    """Of points that differ in their first value only: (the one with the largest
    first value that fits `topology`, the next larger value known not to fit
    there, compiled or passed over); numbers by value, else the last given."""
    order = (
        sorted(range(len(points)), key=lambda i: (number(points[i].values[0]) or 0.0, i))
        if all(number(p.values[0]) is not None for p in points)
        else range(len(points))
    )
    ranked = [points[i] for i in order]
    best = None
    for index, point in enumerate(ranked):
        if fits(point, topology):
            best = index
    if best is None:
        return None, None
    above = next(
        (
            p.values[0]
            for p in ranked[best + 1 :]
            if does_not_fit(p, topology) or topology in p.skipped
        ),
        None,
    )
    return ranked[best], above


def number(value: str) -> float | None:
    """A swept value as a number, where it is one."""
    try:
        return float(value)
    except ValueError:
        return None
