"""Reporters: each turns what was analysed into text and computes no figure. One
registry, keyed by what is reported and the format, says where each renderer
lives (imported only when used), whether it prints to a terminal and how finely
it draws series; the file extensions that choose a format (-o) are the same for
everything reported."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tpumem.errors import TpumemError

# What is reported, as the error for an unknown format names it.
REPORT = "report"  # one run (TraceAnalysis)
PROCESSES = "run"  # a distributed run's processes (ProcessRun), with `where`
PROGRAM = "program"  # one compiled program (CompiledProgram), with its `analysis`
COMPARISON = "compare"  # runs side by side (Comparison)
DIFF = "diff"  # two runs of one program (RunDiff)

# The HTML page draws 1,500 stretches of time per device (each by its highest and
# its last event); the figures use every event.
HTML_SERIES_POINTS = 1500


@dataclass(frozen=True, slots=True)
class Format:
    """What a format is, whatever is reported in it."""

    extensions: tuple[str, ...]  # of -o, that choose it
    terminal: bool = True  # a terminal shows it (`profile` can print it after the run)
    series_points: int = 0  # drawing points per device it needs (0: none)


FORMATS_BY_NAME = {
    "text": Format((".txt",)),
    "json": Format((".json",)),
    "md": Format((".md", ".markdown")),
    "html": Format((".html", ".htm"), terminal=False, series_points=HTML_SERIES_POINTS),
}


class Render(Protocol):
    def __call__(self, value: Any, *, width: int, color: bool, **context: Any) -> str: ...


@dataclass(frozen=True, slots=True)
class Reporter:
    subject: str  # what it reports: REPORT, PROCESSES, ...
    name: str  # the format, as --format names it
    renderer: str  # "module:function", a Render
    # Whether it has an answer-only form, the terminal's default (the text report:
    # `--full` for the rest); the other formats always hold everything.
    brief: bool = False

    @property
    def module(self) -> str:
        """The module its renderer lives in (imported only when used)."""
        return self.renderer.split(":")[0]

    @property
    def extensions(self) -> tuple[str, ...]:
        return FORMATS_BY_NAME[self.name].extensions

    @property
    def terminal(self) -> bool:
        return FORMATS_BY_NAME[self.name].terminal

    @property
    def series_points(self) -> int:
        return FORMATS_BY_NAME[self.name].series_points

    def render(
        self,
        value: Any,
        *,
        width: int = 100,
        color: bool = False,
        full: bool = True,
        **context: Any,
    ) -> str:
        """`context`: what the subject's renderers take besides the value (a
        distributed run's `where`, a program's `analysis`). `full` False: the
        answer alone, where the reporter has that form (`brief`)."""
        function = self.renderer.split(":")[1]
        render: Render = getattr(importlib.import_module(self.module), function)
        if self.brief:
            context["full"] = full
        return render(value, width=width, color=color, **context)


def _reporters(subject: str, **renderers: str) -> dict[tuple[str, str], Reporter]:
    return {
        (subject, name): Reporter(subject, name, where, brief=(subject, name) in _BRIEF)
        for name, where in renderers.items()
    }


# The reporters with an answer-only form: one run's text, and a distributed run's
# (its busiest process's answer).
_BRIEF = {(REPORT, "text"), (PROCESSES, "text")}


REPORTERS = {
    **_reporters(
        REPORT,
        text="tpumem.report.text:render_text",
        json="tpumem.report.json_report:render_json",
        md="tpumem.report.markdown:render_markdown",
        html="tpumem.report.html:render_html",
    ),
    **_reporters(
        PROCESSES,
        text="tpumem.report.run_report:render_run_text",
        json="tpumem.report.run_json:render_run_json",
        md="tpumem.report.run_report:render_run_markdown",
        html="tpumem.report.run_report:render_run_html",
    ),
    **_reporters(
        PROGRAM,
        text="tpumem.report.text:render_program_text",
        json="tpumem.report.json_report:render_program_json",
        md="tpumem.report.markdown:render_program_markdown",
        html="tpumem.report.html:render_program_html",
    ),
    **_reporters(
        COMPARISON,
        text="tpumem.report.compare_text:render_compare_text",
        json="tpumem.report.compare_json:render_compare_json",
        html="tpumem.report.html:render_compare_html",
    ),
    **_reporters(
        DIFF,
        text="tpumem.report.diff_report:render_diff_text",
        json="tpumem.report.diff_report:render_diff_json",
        md="tpumem.report.diff_report:render_diff_markdown",
        html="tpumem.report.html:render_diff_html",
    ),
}


def formats(subject: str = REPORT, terminal: bool = False) -> tuple[str, ...]:
    """The formats `subject` is reported in (`terminal`: those a terminal shows)."""
    return tuple(
        r.name for (s, _), r in REPORTERS.items() if s == subject and (r.terminal or not terminal)
    )


FORMATS = formats(REPORT)


def reporter_for(
    output: Path | None, requested: str | None, subject: str = REPORT, terminal: bool = False
) -> Reporter:
    """The reporter asked for, else the one the output file's extension names, else
    the terminal's; one line for a format `subject` is not reported in."""
    names = formats(subject, terminal)
    if requested is not None:
        if requested not in names:
            raise TpumemError(
                f"unknown {subject} format {requested!r} (choose from {', '.join(names)})"
            )
        return REPORTERS[(subject, requested)]
    suffix = output.suffix.lower() if output is not None else ""
    found = [name for name in names if suffix in FORMATS_BY_NAME[name].extensions]
    return REPORTERS[(subject, found[0] if found else "text")]


def reporter(subject: str, fmt: str) -> Reporter:
    """The same format's reporter for another subject (a report that turns out to
    be a distributed run's, or one program's); one line where it has none."""
    found = REPORTERS.get((subject, fmt))
    if found is None:
        names = ", ".join(formats(subject))
        raise TpumemError(f"no {subject} format {fmt!r} (choose from {names})")
    return found
