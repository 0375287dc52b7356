"""Runs side by side: each figure of each run (its busiest device), the best of
each row, ratios against the first run, and where their peaks differ."""

from __future__ import annotations

from dataclasses import dataclass

from tpumem.analysis import figures as fig
from tpumem.analysis import provenance
from tpumem.analysis.compiled.programs import largest_temp
from tpumem.analysis.compiled.step_programs import (
    XLA_TPU,
    Entry,
    no_program_reason,
    program_figures,
    step_program,
)
from tpumem.analysis.figures import BYTES, TEXT, TIME
from tpumem.analysis.kinds import KINDS
from tpumem.analysis.trace_figures import DeviceAnalysis, TraceAnalysis
from tpumem.distinct_names import distinct_names

TOP_OPS = 5


@dataclass(frozen=True, slots=True)
class CompareRow:
    key: str  # which figure: a key of ROWS, "program." + one of PROGRAM_ROWS, ...
    about: int | str | None  # the capacity (bytes) or TPU topology a row is of
    unit: str  # BYTES, COUNT, SHARE, RATE, TIME or TEXT
    values: tuple[int | float | str | None, ...]  # one per run
    labels: tuple[str, ...]  # how each value was obtained
    best: int | None  # the run with the lowest value, where that means anything
    ratios: tuple[float | None, ...]  # value / the first run's value


@dataclass(frozen=True, slots=True)
class KindDifference:
    kind: str  # a kind's key (analysis/kinds.py)
    bytes: tuple[int, ...]  # of that kind at each run's peak (the single-run report's)
    change: tuple[int, ...]  # against the first run


@dataclass(frozen=True, slots=True)
class Comparison:
    names: tuple[str, ...]
    runs: tuple[TraceAnalysis, ...]
    devices: tuple[str | None, ...]  # the device each run is shown by
    rows: tuple[CompareRow, ...]
    # Each run's training-step program side by side (step_programs.py); empty when
    # no run compiled one.
    program_rows: tuple[CompareRow, ...]
    kinds: tuple[KindDifference, ...]  # the peaks by kind, the largest change first
    top_ops: tuple[tuple[tuple[str, int], ...], ...]  # per run: (op, bytes at peak)
    alignment: str  # "step" when every run has step marks, else "normalized time"


def busiest(run: TraceAnalysis) -> DeviceAnalysis | None:
    return max(run.devices, key=lambda d: d.peak.bytes, default=None)


def run_names(runs: list[TraceAnalysis]) -> tuple[str, ...]:
    """Framework names, with what tells the runs' paths apart where two runs share
    one (`jax (v1/train)`, `jax (v3/train)`: distinct_names.py)."""
    frameworks = [run.framework for run in runs]
    told = distinct_names([run.path or str(index + 1) for index, run in enumerate(runs)])
    names = []
    for run, apart in zip(runs, told, strict=True):
        name = run.framework
        if frameworks.count(name) > 1:
            name += f" ({apart})"
        names.append(name)
    return tuple(names)


def _row(
    key: str,
    unit: str,
    entries: list[Entry],
    lower_is_better: bool = True,
    about: int | str | None = None,
) -> CompareRow:
    values = tuple(value for value, _ in entries)
    numbers = [(i, v) for i, v in enumerate(values) if isinstance(v, (int, float))]
    best = None
    if lower_is_better and len(numbers) > 1 and len({v for _, v in numbers}) > 1:
        best = min(numbers, key=lambda item: item[1])[0]
    first = values[0] if numbers and numbers[0][0] == 0 else None
    ratios = tuple(
        v / first
        if isinstance(v, (int, float)) and isinstance(first, (int, float)) and first
        else None
        for v in values
    )
    labels = tuple(label for _, label in entries)
    return CompareRow(key, about, unit, values, labels, best, ratios)


# Each run's figures, in order: the device's (analysis/figures.py), then its largest
# program temp.
COMPARED = fig.COMPARED
PROGRAM_TEMP = "program_temp"
ROWS = (*((f.key, f.unit) for f in COMPARED), (PROGRAM_TEMP, BYTES))


def _figures(device: DeviceAnalysis | None, run: TraceAnalysis) -> dict[str, Entry]:
    na: Entry = (None, provenance.NOT_AVAILABLE)
    if device is None:
        return {}
    temp = largest_temp(run.programs)
    entries: dict[str, Entry] = {}
    for figure in COMPARED:
        value = figure.value(device)
        # (No rate where the device's events span no time: not available, though
        # its events were counted.)
        missing_rate = value is None and figure is fig.ALLOCATION_RATE
        entries[figure.key] = na if missing_rate else (value, figure.label(device))
    if device.padding.included:  # a TPU's recorded sizes hold their padding
        entries[fig.PADDING.key] = (0, provenance.INCLUDED)
    entries[PROGRAM_TEMP] = (temp.temp_bytes, provenance.COMPILE_TIME) if temp else na
    return entries


# Rows where less is better: what the step needs, not what it is handed.
PROGRAM_NEEDS = ("peak", "temps")
PROGRAM_ROWS = (
    ("name", TEXT),
    ("peak", BYTES),
    ("arguments", BYTES),
    ("outputs", BYTES),
    ("aliased", BYTES),
    ("temps", BYTES),
    ("code", BYTES),
    ("peak_at", TEXT),
    ("largest", BYTES),
    ("largest_what", TEXT),
)


def _program_rows(runs: list[TraceAnalysis]) -> tuple[CompareRow, ...]:
    steps = [step_program(run) for run in runs]
    if not any(steps):
        return ()
    figures = [program_figures(step) if step else {} for step in steps]
    topologies = dict.fromkeys(t for step in steps if step for t in step.on_tpu)
    specs: list[tuple[str, str, str | None]] = [(key, unit, None) for key, unit in PROGRAM_ROWS]
    for name in topologies:
        specs.append(("tpu", BYTES, name))
        specs.append(("tpu-temps", BYTES, name))
    missing = (None, provenance.NOT_AVAILABLE)
    rows = []
    for key, unit, topology in specs:
        figure = f"{key}:{topology}" if topology else key
        entries = [
            f.get(figure, missing) if step or key != "name" else (no_program_reason(run), "")
            for f, step, run in zip(figures, steps, runs, strict=True)
        ]
        needs = key in PROGRAM_NEEDS or key.startswith("tpu")
        rows.append(_row(f"program.{key}", unit, entries, lower_is_better=needs, about=topology))
    return tuple(rows + _chip_kind_rows(runs))


CHIP_KIND = "program.tpu-kind:"  # and a kind's key: a chip's need of that kind


def _chip_kind_rows(runs: list[TraceAnalysis]) -> list[CompareRow]:
    """Each topology's chip by kind, run by run (chip_kinds.py: XLA:TPU's plan,
    with the kinds each run gave its arrays)."""
    by_topology: dict[str, list[dict[str, int]]] = {}
    for index, run in enumerate(runs):
        for target in run.tpu:
            if target.fit is not None and target.fit.kinds:
                chips = by_topology.setdefault(target.topology, [{} for _ in runs])
                chips[index] = {k.kind: k.bytes for k in target.fit.kinds}
    rows = []
    for topology, chips in by_topology.items():
        for kind in KINDS:
            if any(kind in chip for chip in chips):
                entries: list[Entry] = [
                    (chip.get(kind, 0), XLA_TPU) if chip else (None, provenance.NOT_AVAILABLE)
                    for chip in chips
                ]
                rows.append(
                    _row(CHIP_KIND + kind, BYTES, entries, lower_is_better=True, about=topology)
                )
    return rows


def _by_op(device: DeviceAnalysis | None) -> tuple[tuple[str, int], ...]:
    if device is None:
        return ()
    totals: dict[str, int] = {}
    for group in device.peak.groups:
        key = group.op or "(no op)"
        totals[key] = totals.get(key, 0) + group.bytes
    return tuple(sorted(totals.items(), key=lambda kv: -kv[1])[:TOP_OPS])


def _kinds(devices: list[DeviceAnalysis | None]) -> tuple[KindDifference, ...]:
    """Each run's peak by kind, as its own report gives it; the kind that differs
    most from the first run first."""
    per_run = [
        {k.kind: k.bytes for k in d.kinds.kinds} if d is not None and d.kinds is not None else {}
        for d in devices
    ]
    result = []
    for kind in KINDS:
        if any(kind in breakdown for breakdown in per_run):
            sizes = tuple(breakdown.get(kind, 0) for breakdown in per_run)
            result.append(KindDifference(kind, sizes, tuple(s - sizes[0] for s in sizes)))
    return tuple(sorted(result, key=lambda r: -max(abs(c) for c in r.change)))


def _capacity_rows(
    runs: list[TraceAnalysis], devices: list[DeviceAnalysis | None]
) -> list[CompareRow]:
    """Each run's busiest device at the capacity asked about (capacity.py)."""
    checks = [
        next((c for c in run.capacity if d is not None and c.device == d.device), None)
        for run, d in zip(runs, devices, strict=True)
    ]
    if not any(checks):
        return []
    size = next(c for c in checks if c).capacity_bytes
    modeled, na = provenance.MODELED, (None, provenance.NOT_AVAILABLE)
    return [
        _row(
            "capacity_failure",
            BYTES,
            [
                na
                if c is None
                else (c.failure.requested_bytes, modeled)
                if c.failure
                else (None, "fits")
                for c in checks
            ],
            lower_is_better=False,
            about=size,
        ),
        _row(
            "capacity_headroom",
            BYTES,
            [
                na
                if c is None
                else (c.headroom_bytes, modeled)
                if c.failure is None
                else (None, "runs out of memory")
                for c in checks
            ],
            lower_is_better=False,
            about=size,
        ),
        _row(
            "capacity_smallest",
            BYTES,
            [na if c is None else (c.smallest_bytes, modeled) for c in checks],
        ),
    ]


def compare(runs: list[TraceAnalysis]) -> Comparison:
    devices = [busiest(run) for run in runs]
    figures = [_figures(device, run) for device, run in zip(devices, runs, strict=True)]
    missing = (None, provenance.NOT_AVAILABLE)
    rows = [
        _row(
            "framework",
            TEXT,
            [(f"{run.framework} ({run.backend})", "") for run in runs],
            lower_is_better=False,
        ),
        _row(
            "fidelity",
            TEXT,
            [(d.fidelity if d else "no events", "") for d in devices],
            lower_is_better=False,
        ),
    ]
    if any(run.out_of_memory for run in runs):  # what failed comes first
        rows.append(
            _row(
                "out_of_memory",
                BYTES,
                [
                    (run.out_of_memory[-1].requested_bytes, provenance.MEASURED)
                    if run.out_of_memory
                    else (None, "did not run out")
                    for run in runs
                ],
                lower_is_better=False,
            )
        )
    rows += _capacity_rows(runs, devices)
    # Runs that allocated nothing (scripts `tpumem fit` compiled, never ran) have
    # no run figures to line up: their answers are the fit table's.
    for key, unit in ROWS if any(devices) else ():
        entries = [f.get(key, missing) for f in figures]
        rows.append(_row(key, unit, entries, lower_is_better=unit not in (TEXT, TIME)))
    return Comparison(
        names=run_names(runs),
        runs=tuple(runs),
        devices=tuple(d.device if d else None for d in devices),
        rows=tuple(rows),
        program_rows=_program_rows(runs),
        kinds=_kinds(devices),
        top_ops=tuple(_by_op(d) for d in devices),
        alignment="step" if all(run.steps >= 2 for run in runs) else "normalized time",
    )
