"""Renderers: each turns a RunAnalysis into text; none computes a figure."""

from __future__ import annotations

from pathlib import Path

from tpumem.errors import TpumemError

FORMATS = ("text", "json", "md", "html")
_EXTENSIONS = {
    ".json": "json",
    ".md": "md",
    ".markdown": "md",
    ".txt": "text",
    ".html": "html",
    ".htm": "html",
}


def format_for(output: Path | None, requested: str | None) -> str:
    """The format asked for, else the one the output file's extension names."""
    if requested is not None:
        if requested not in FORMATS:
            raise TpumemError(
                f"unknown report format {requested!r} (choose from {', '.join(FORMATS)})"
            )
        return requested
    if output is not None:
        return _EXTENSIONS.get(output.suffix.lower(), "text")
    return "text"


def render(analysis: object, fmt: str, width: int = 100, color: bool = False) -> str:
    from tpumem.analysis.summary import RunAnalysis

    assert isinstance(analysis, RunAnalysis)
    if fmt == "json":
        from tpumem.report.json_report import render_json

        return render_json(analysis)
    if fmt == "html":
        from tpumem.report.html import render_html

        return render_html(analysis)
    if fmt == "md":
        from tpumem.report.markdown import render_markdown

        return render_markdown(analysis)
    from tpumem.report.text import render_text

    return render_text(analysis, width=width, color=color)
