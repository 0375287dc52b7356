"""Reports inside a notebook's output: a run's answer (the peak, its kinds, the
lines that hold it, what to change) as plain HTML, with the whole page folded
under it, in a frame of its own so its styles and scripts touch nothing of the
notebook's; and the text report beside it for consoles that show no HTML
(IPython in a terminal, a notebook viewer without the frame). What
`_repr_mimebundle_` gives for runs, comparisons and tracks."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpumem.analysis.comparison import Comparison
    from tpumem.analysis.trace_figures import TraceAnalysis

TEXT_WIDTH = 100
# The frame grows to its page once loaded; this is its height until then.
FRAME_HEIGHT_PX = 720
_GROW = "this.style.height=(this.contentDocument.documentElement.scrollHeight+24)+'px'"


def framed(page: str) -> str:
    """A whole HTML page as an iframe element of its own."""
    return (
        f'<iframe class="tpumem-report" srcdoc="{html.escape(page, quote=True)}" '
        f'style="width:100%;height:{FRAME_HEIGHT_PX}px;border:0" onload="{_GROW}"></iframe>'
    )


FOLDED = "The whole report"
_TABLE = "border-collapse:collapse;margin:4px 0 10px"
_CELL = "padding:2px 10px 2px 0;text-align:left;vertical-align:top"


def folded(page: str) -> str:
    """The page's frame under a fold; it takes its page's height when opened (a
    closed fold has none to measure)."""
    frame = framed(page).replace(' onload="', ' data-grow="')
    grow = "var f=this.querySelector('iframe');" + _GROW.replace("this.", "f.")
    return (
        f'<details ontoggle="{html.escape(grow, quote=True)}"><summary>{FOLDED}</summary>'
        f"{frame}</details>"
    )


def answer_html(analysis: TraceAnalysis) -> str:
    """The answer the page opens with, as plain HTML (the notebook's own styles)."""
    from tpumem.report.html import answer_data

    answer = answer_data(analysis)
    if answer is None:
        return ""
    parts = [f"<p><b>{html.escape(answer['headline'])}</b></p>"]
    parts += [f"<p><b>{html.escape(verdict)}</b></p>" for verdict in answer["verdicts"]]
    for table in answer["tables"]:
        head = "".join(f'<th style="{_CELL}">{html.escape(h)}</th>' for h in table["headers"])
        body = "".join(
            "<tr>" + "".join(f'<td style="{_CELL}">{html.escape(c)}</td>' for c in row) + "</tr>"
            for row in table["rows"]
        )
        parts.append(
            f"<div>{html.escape(table['title'])}</div>"
            f'<table style="{_TABLE}"><tr>{head}</tr>{body}</table>'
        )
    parts += [f"<p><i>{html.escape(note)}</i></p>" for note in answer["notes"]]
    if answer["changes"]:
        items = "".join(
            f"<li><b>{html.escape(figure)}</b> {html.escape(sentence)} "
            f"<i>({html.escape(how)})</i></li>"
            for figure, sentence, how in answer["changes"]
        )
        parts.append(f"<div>{html.escape(answer['changes_title'])}</div><ul>{items}</ul>")
    return "".join(parts)


def run_bundle(analysis: TraceAnalysis) -> dict[str, str]:
    from tpumem.report import REPORT, reporter

    return {
        "text/html": answer_html(analysis) + folded(reporter(REPORT, "html").render(analysis)),
        # (the answer, as on a terminal; `%tpumem_report --format text --full`: all)
        "text/plain": reporter(REPORT, "text").render(analysis, width=TEXT_WIDTH, full=False),
    }


def comparison_bundle(comparison: Comparison) -> dict[str, str]:
    from tpumem.report import COMPARISON, reporter

    return {
        "text/html": framed(reporter(COMPARISON, "html").render(comparison)),
        "text/plain": reporter(COMPARISON, "text").render(comparison, width=TEXT_WIDTH),
    }
