"""Text from a trace, as a terminal or a markdown page may show it.

Names in a trace (ops, devices, sources, warnings, a framework's name) were written
by another process and may hold anything: a terminal escape that sets the window
title or clears the screen, a bidirectional override that reorders a line, rich
markup, markdown. Reports show such characters as escapes, the way Python's repr
does, and print the rest as it is.
"""

from __future__ import annotations

import re

from rich.markup import escape as _escape_markup

# C0 and C1 controls, DEL, the line and paragraph separators (a new line to
# many a terminal, log viewer and editor: a line of `check` split in two), and
# the bidirectional marks and overrides.
_UNSEEN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: object) -> str:
    """`text` with every control character shown as an escape (\\x1b, \\u202e)."""
    return _UNSEEN.sub(_escaped, str(text))


def markup(text: object) -> str:
    """`text` for a rich string that also holds tpumem's own markup."""
    return _escape_markup(visible(text))


def markdown(text: object) -> str:
    """`text` for a markdown table cell: shown as it is, never as markup or HTML."""
    return re.sub(r"([\\|<>`*\[])", r"\\\1", visible(text))
