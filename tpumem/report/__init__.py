"""Reporters: each turns a RunAnalysis into text and computes no figure. One
registry says, for every format, its name (--format), the file extensions that
choose it (-o), where its renderer lives (imported only when used), whether it
prints to a terminal, and how finely it draws series."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from tpumem.errors import TpumemError

if TYPE_CHECKING:
    from tpumem.analysis.summary import RunAnalysis


class Render(Protocol):
    def __call__(self, analysis: RunAnalysis, *, width: int, color: bool) -> str: ...


@dataclass(frozen=True, slots=True)
class Reporter:
    name: str
    extensions: tuple[str, ...]
    renderer: str  # "module:function", a Render
    terminal: bool = True  # `profile` can print it after the run
    series_points: int = 0  # drawing points per device it needs (0: none)

    @property
    def module(self) -> str:
        """The module its renderer lives in (imported only when used)."""
        return self.renderer.split(":")[0]

    def render(self, analysis: RunAnalysis, *, width: int = 100, color: bool = False) -> str:
        function = self.renderer.split(":")[1]
        render: Render = getattr(importlib.import_module(self.module), function)
        return render(analysis, width=width, color=color)


# The HTML page draws 1,500 points per device; the figures use every event.
HTML_SERIES_POINTS = 1500

REPORTERS = {
    reporter.name: reporter
    for reporter in (
        Reporter("text", (".txt",), "tpumem.report.text:render_text"),
        Reporter("json", (".json",), "tpumem.report.json_report:render_json"),
        Reporter("md", (".md", ".markdown"), "tpumem.report.markdown:render_markdown"),
        Reporter(
            "html",
            (".html", ".htm"),
            "tpumem.report.html:render_html",
            terminal=False,
            series_points=HTML_SERIES_POINTS,
        ),
    )
}
FORMATS = tuple(REPORTERS)


def reporter_for(output: Path | None, requested: str | None) -> Reporter:
    """The reporter asked for, else the one the output file's extension names, else
    the terminal's."""
    if requested is not None:
        if requested not in REPORTERS:
            raise TpumemError(
                f"unknown report format {requested!r} (choose from {', '.join(FORMATS)})"
            )
        return REPORTERS[requested]
    suffix = output.suffix.lower() if output is not None else ""
    found = [r for r in REPORTERS.values() if suffix in r.extensions]
    return found[0] if found else REPORTERS["text"]
