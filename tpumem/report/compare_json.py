"""`tpumem compare --format json`: the comparison ("tpumem-compare/1",
tpumem/report/schemas/tpumem-compare-1.json) with each run's whole JSON report
("tpumem-report/1", referred to, not copied) under `runs`, as `tpumem report
--format json` gives it. Every key is declared here, as in json_report.py."""

from __future__ import annotations

import dataclasses
from typing import Any

from tpumem.analysis.comparison import CompareRow, Comparison, KindDifference
from tpumem.report.compare_words import row_title
from tpumem.report.json_report import KIND, REPORT, dump
from tpumem.report.json_shapes import (
    INT,
    STRING,
    Array,
    Const,
    Fixed,
    Object,
    Optional,
    Reference,
    fields,
    key,
    record,
)
from tpumem.report.kind_words import difference_sentence

COMPARE_SCHEMA = "tpumem-compare/1"

# `key` and `about` name the row for programs (its title is for people, and its
# words may change); `figure` is the title the text and the page show.
ROW = Object(
    (
        *fields(
            CompareRow,
            "key",
            "about",
            about={
                "key": "which figure, as tpumem names it (stable: the title's words may change): "
                'a run figure\'s key ("peak", "pool", ...: analysis/figures.py), "program." and '
                'a program figure\'s ("program.temps"), "program.tpu-kind:" and a kind\'s (a '
                "chip's need of that kind)",
                "about": "what the row is of, where a figure has several rows: the capacity in "
                "bytes, or the TPU topology",
            },
        ),
        key("figure", STRING, row_title),
        *fields(CompareRow, "unit", "values", "labels", "best", "ratios"),
    )
)


def _without_series(run: Any) -> Any:
    """A run's report as the comparison carries it: its devices' series (drawing
    only, for --html) left out."""
    devices = tuple(dataclasses.replace(d, series=None) for d in run.devices)
    return dataclasses.replace(run, devices=devices)


COMPARISON = Object(
    (
        key("schema", Const(COMPARE_SCHEMA), lambda _: COMPARE_SCHEMA),
        key("names", Array(STRING)),
        key("devices", Array(Optional(STRING))),
        key("alignment", STRING),
        key("rows", Array(ROW)),
        key("program_rows", Array(ROW)),
        key(
            "kinds",
            Array(record(KindDifference, "kind", "bytes", "change", shapes={"kind": KIND})),
            about="Each run's peak by kind, as its own report gives it; the kind that differs "
            "most from the first run first.",
        ),
        key(
            "difference",
            Optional(STRING),
            difference_sentence,
            about="The kind whose bytes differ most between a run and the first, in one sentence.",
        ),
        key("top_ops", Array(Array(Fixed((STRING, INT))))),
        key(
            "runs",
            Array(Reference(REPORT, "../tpumem-report/1")),
            lambda comparison: [_without_series(run) for run in comparison.runs],
            about="each run's whole JSON report, as `tpumem report --format json` gives it "
            "(its devices' series null)",
        ),
    ),
    title="tpumem comparison",
)


def comparison_data(comparison: Comparison) -> dict[str, Any]:
    """The comparison without its runs' reports (the page carries them apart)."""
    return COMPARISON.without("runs").write(comparison)


def render_compare_json(comparison: Comparison, *, width: int = 100, color: bool = False) -> str:
    """(Width and color are the terminal's: JSON has neither.)"""
    return dump(COMPARISON.write(comparison), indent=2) + "\n"
