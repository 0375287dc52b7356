"""`tpumem fit --sweep NAME=V1,V2,... [--sweep ...]`: the script compiled at every
combination of its swept arguments' values, a trace each, and one table.

The first --sweep is the argument whose largest value that fits is sought (a
batch); the others (a remat policy, a sequence length) make the frontier's rows.
Where the first's values are numbers, a value above one that XLA:TPU refused on
a slice, at the same values of the others, is not compiled for that slice: a
larger batch needs no less (each compile is a whole run of the script).
"""

from __future__ import annotations

import itertools
import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tpumem.commands.fit_names import default_name, label, say_short
from tpumem.commands.fit_stops import FitStopped, say_stopped
from tpumem.commands.options import text_width
from tpumem.commands.requests import FitRequest
from tpumem.errors import TpumemError

if TYPE_CHECKING:
    from tpumem.analysis.compiled.tpu import TpuTarget

MAX_COMBINATIONS = 64  # each a compile of the whole script per slice


def check_sweeps(request: FitRequest) -> None:
    """One line, before anything is compiled, for sweeps fit cannot make."""
    if request.output is not None:
        raise TpumemError(
            "--sweep writes a trace per value (<script>.fit-NAME-VALUE.tpumem): give no -o"
        )
    names = [s.name for s in request.sweeps]
    if len(set(names)) < len(names):
        twice = next(n for n in names if names.count(n) > 1)
        raise TpumemError(f"--sweep {twice}=... given twice: give its values in one")
    count = 1
    for sweep in request.sweeps:
        count *= len(sweep.values)
    if count > MAX_COMBINATIONS:
        raise TpumemError(
            f"--sweep: {count:,} combinations; at most {MAX_COMBINATIONS}, each a compile of "
            "the whole script"
        )


def with_argument(args: tuple[str, ...], name: str, value: str) -> tuple[str, ...]:
    """The script's arguments with --NAME set to `value`: in place where given
    (`--NAME V` or `--NAME=V`), else added at the end."""
    flag = f"--{name}"
    changed = list(args)
    for index, arg in enumerate(changed):
        if arg == flag and index + 1 < len(changed):
            changed[index + 1] = value
            return tuple(changed)
        if arg.startswith(flag + "="):
            changed[index] = f"{flag}={value}"
            return tuple(changed)
    return (*changed, flag, value)


def run_sweep(
    request: FitRequest, compiled: Callable[[FitRequest, Path], Path], short: set[str]
) -> int:
    """Every combination compiled (`compiled`: the request at it, its trace's
    default name -> the trace), then the tables; 0 where every slice has a
    combination that fits, else 1. A program a combination does not change is
    compiled at the first and read back at the others (the sweep's own
    directory: adapters/jax/compile_cache.py)."""
    with tempfile.TemporaryDirectory(prefix="tpumem-sweep-") as kept:
        return _swept(replace(request, compile_cache=Path(kept)), compiled, short)


def _swept(
    request: FitRequest, compiled: Callable[[FitRequest, Path], Path], short: set[str]
) -> int:
    from tpumem.analysis.compiled.sweep import SweepPoint, does_not_fit, fits, number

    first, *others = request.sweeps
    names = tuple(s.name for s in request.sweeps)
    slices = {label(request, t): t for t in request.tpu}
    numbers = all(number(v) is not None for v in first.values)
    combinations = [
        (value, *rest)
        for rest in itertools.product(*(s.values for s in others))
        for value in first.values
    ]
    points: list[SweepPoint] = []
    refused_at: dict[tuple[tuple[str, ...], str], str] = {}  # (others' values, slice) -> value
    for done, values in enumerate(combinations):
        skipped = {}
        for topology in slices:
            smaller = refused_at.get((values[1:], topology))
            if (
                numbers
                and smaller is not None
                and (number(values[0]) or 0) > (number(smaller) or 0)
            ):
                skipped[topology] = f"--{first.name} {smaller} did not fit"
        open_ = tuple(t for name, t in slices.items() if name not in skipped)
        said = " ".join(f"--{n} {v}" for n, v in zip(names, values, strict=True))
        if not open_:
            points.append(SweepPoint(values, {}, skipped))
            continue
        if not request.quiet:
            print(
                f"tpumem fit: {said} ({done + 1} of {len(combinations)})",
                file=sys.stderr,
                flush=True,
            )
        args = request.args
        for name, value in zip(names, values, strict=True):
            args = with_argument(args, name, value)
        # (The search is the sweep's to do, unless asked: --search.)
        at = replace(request, args=args, tpu=open_, search=request.search or False)
        suffix = "".join(f"-{n}-{v}" for n, v in zip(names, values, strict=True))
        try:
            trace = compiled(at, default_name(request, suffix))
        except FitStopped as stop:  # the combinations done, then how it was stopped
            # (The stopped combination's own answer is partial: it is no point;
            # its trace, and those before, are kept.)
            if points:
                _report(request, names, points)
            say_short(short)
            return say_stopped(replace(stop, where=f"{stop.where}, {said}"))
        point = SweepPoint(values, _answers(trace), skipped)
        points.append(point)
        print(f"tpumem: trace written to {trace}", file=sys.stderr)
        for topology in slices:
            key = (values[1:], topology)
            if does_not_fit(point, topology) and (
                key not in refused_at or (number(values[0]) or 0) < (number(refused_at[key]) or 0)
            ):
                refused_at[key] = values[0]  # (the smallest refused: given in any order)
    _report(request, names, points)
    say_short(short)
    fitting = {s for p in points for s in slices if fits(p, s)}
    return 0 if set(slices) <= fitting else 1


def _answers(trace: Path) -> dict[str, TpuTarget]:
    """Each slice's answer in a combination's trace."""
    from tpumem.reading.analyses import analysed

    return {t.topology: t for t in analysed(trace, str(trace)).tpu}


def _report(request: FitRequest, names: tuple[str, ...], points: list) -> None:
    from tpumem.report.text import render_sweep_text

    slices = [label(request, t) for t in request.tpu]
    text = render_sweep_text(
        names,
        slices,
        points,
        width=text_width(request.width, sys.stdout),
        color=sys.stdout.isatty(),
    )
    print(text, end="")
