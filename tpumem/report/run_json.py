"""A distributed run's JSON ("tpumem-run/2"): each process's figures, their
spread across processes (by figure key: analysis/figures.py), and the busiest
process's whole report, a "tpumem-report/1" object its schema refers to."""

from __future__ import annotations

from typing import Any

from tpumem.analysis.processes import (
    CLOCK_AXIS,
    STEP_AXIS,
    ProcessRun,
    ProcessSummary,
)
from tpumem.analysis.processes import (
    SPREAD as SPREAD_FIGURES,
)
from tpumem.report.json_report import REPORT, dump, finite
from tpumem.report.json_shapes import (
    INT,
    NUMBER,
    STRING,
    Array,
    Const,
    Object,
    Reference,
    fields,
    key,
    one_of,
)
from tpumem.report.rows import ending_text
from tpumem.report.run_report import notes

RUN_SCHEMA = "tpumem-run/2"

PROCESS = Object(
    (
        *fields(
            ProcessSummary,
            "path",
            "host",
            "index",
            "count",
            "pid",
            "run",
            "framework",
            "backend",
            "complete",
        ),
        key(
            "ended",
            STRING,
            lambda p: ending_text(p.exit, p.complete, p.source, p.running),
        ),
        *fields(
            ProcessSummary,
            "devices",
            "peak_bytes",
            "peak_device",
            "peak_label",
            "peak_step",
            "peak_time_ns",
            "pool_bytes",
            "fragmentation_at_peak",
            "steps",
        ),
        key(
            "made_from",
            one_of("summary", "trace"),
            about="where its figures were made: the summary its recording left beside the "
            "trace, or its trace, read here",
        ),
    )
)


def _path(at: str) -> Any:
    """The path of the process a spread names, by its index (`highest_at`, ...)."""
    return lambda pair: pair[1][getattr(pair[0], at)].path


SPREAD = Object(
    (
        key("figure", one_of(*(f.key for f, _ in SPREAD_FIGURES)), lambda pair: pair[0].figure.key),
        key("highest", NUMBER, lambda pair: pair[0].highest),
        key("highest_process", STRING, _path("highest_at")),
        key("lowest", NUMBER, lambda pair: pair[0].lowest),
        key("lowest_process", STRING, _path("lowest_at")),
        key("mean", NUMBER, lambda pair: pair[0].mean),
        key("difference", NUMBER, lambda pair: pair[0].difference),
        key("imbalance", NUMBER, lambda pair: pair[0].imbalance, about="difference / highest"),
    ),
    about="one figure of each process's busiest device (its key: analysis/figures.py)",
)
RUN = Object(
    (
        key("schema", Const(RUN_SCHEMA), lambda _: RUN_SCHEMA),
        key(
            "path",
            STRING,
            lambda pair: pair[1],
            about="the run's directory, or how many traces were given",
        ),
        key("run_ids", Array(STRING), lambda pair: pair[0].run_ids),
        key("processes", Array(PROCESS), lambda pair: pair[0].processes),
        key(
            "spread",
            Array(SPREAD),
            lambda pair: [(s, pair[0].processes) for s in pair[0].spreads],
        ),
        key(
            "busiest",
            STRING,
            lambda pair: pair[0].processes[pair[0].busiest_at].path,
            about="the busiest process's trace",
        ),
        key("axis", one_of(STEP_AXIS, CLOCK_AXIS), lambda pair: pair[0].axis),
        key("missing_ranks", Array(INT), lambda pair: pair[0].missing_ranks),
        key("repeated_ranks", Array(INT), lambda pair: pair[0].repeated_ranks),
        key("notes", Array(STRING), lambda pair: notes(pair[0])),
        key(
            "busiest_report",
            Reference(REPORT, "../tpumem-report/1"),
            lambda pair: pair[0].busiest,
            about="the busiest process's report",
        ),
    ),
    title="tpumem report of a distributed run",
    about="Each process of a run (one trace each): its peak on its busiest device, pool and "
    "fragmentation; their spread across processes; and the busiest process's whole report "
    "(busiest_report, a tpumem-report/1 object). Bytes are integers, times nanoseconds "
    "from each trace's start.",
)


def run_dict(run: ProcessRun, where: str) -> dict[str, Any]:
    return RUN.write((run, where))


def render_run_json(run: ProcessRun, where: str, *, width: int = 100, color: bool = False) -> str:
    return dump(finite(run_dict(run, where)), indent=2) + "\n"
