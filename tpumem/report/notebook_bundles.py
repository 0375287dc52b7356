"""Reports inside a notebook's output: the HTML page, in a frame of its own so its
styles and scripts touch nothing of the notebook's, and the text report beside it
for consoles that show no HTML (IPython in a terminal, a notebook viewer without
the frame). What `_repr_mimebundle_` gives for runs, comparisons and tracks."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpumem.analysis.comparison import Comparison
    from tpumem.analysis.run_figures import RunAnalysis

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


def run_bundle(analysis: RunAnalysis) -> dict[str, str]:
    from tpumem.report import REPORT, reporter

    return {
        "text/html": framed(reporter(REPORT, "html").render(analysis)),
        "text/plain": reporter(REPORT, "text").render(analysis, width=TEXT_WIDTH),
    }


def comparison_bundle(comparison: Comparison) -> dict[str, str]:
    from tpumem.report import COMPARISON, reporter

    return {
        "text/html": framed(reporter(COMPARISON, "html").render(comparison)),
        "text/plain": reporter(COMPARISON, "text").render(comparison, width=TEXT_WIDTH),
    }
