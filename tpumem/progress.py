"""A spinner on stderr while long work runs, for the commands."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress(message: str) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr while long work runs, only when a person is watching;
    what it yields changes the spinner's words."""
    if sys.stderr.isatty():
        from rich.console import Console

        with Console(stderr=True).status(message) as status:
            yield lambda words: status.update(f"{message}: {words}")
    else:
        yield lambda words: None
