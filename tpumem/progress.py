"""A spinner on stderr while long work runs, for the commands."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

# What changes the words of the spinners turning now, the innermost last.
_TURNING: list[Callable[[str], None]] = []


@contextmanager
def progress(message: str) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr while long work runs, only when a person is watching;
    what it yields changes the spinner's words."""
    if sys.stderr.isatty():
        from rich.console import Console

        with Console(stderr=True).status(message) as status:
            _TURNING.append(lambda words: status.update(f"{message}: {words}"))
            try:
                yield _TURNING[-1]
            finally:
                _TURNING.pop()
    else:
        yield lambda words: None


def turning() -> Callable[[str], None] | None:
    """What changes the words of the spinner turning now (None: none turns), for
    a wait below the command that started it (object storage's)."""
    return _TURNING[-1] if _TURNING else None
