"""The options several commands declare alike (the text's width, the page's
format and file, --capacity, --tpu, --force), each declared once, its value parsed
where it is declared (tpumem/commands/options.py)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tpumem.commands import options
from tpumem.report import REPORT, formats
from tpumem.tpu.topology import Topology


def either(names: tuple[str, ...]) -> str:
    """The formats a --format takes, from the reporters' registry: "text, json or md"."""
    return f"{', '.join(names[:-1])} or {names[-1]}"


def finite(value: float | None) -> float | None:
    """click's ranges let NaN through (it compares false with both ends)."""
    if value is not None and value != value:
        raise typer.BadParameter("NaN is not a number it can take")
    return value


# The text report's width in columns: narrower cannot hold its tables, wider is
# more than any terminal shows.
Width = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        help="Width of the text report, in columns [default: the terminal's, else 80].",
        min=options.MIN_WIDTH,
        max=options.MAX_WIDTH,
        metavar="N",
        show_default=False,
    ),
]


# --capacity, parsed by one rule: report and compare ask whether the run fits,
# check fails where it does not.
_CAPACITY: dict[str, Any] = {"metavar": "SIZE", "parser": options.capacity}
Capacity = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        "--capacity",
        help="Would the run fit an allocator of this size (16GiB, 800MB, bytes)? Replays "
        "its allocations through the BFC allocator model: the first that would fail, or "
        "the headroom left; and the smallest size that holds the run. Modeled.",
        **_CAPACITY,
    ),
]
CheckCapacity = Annotated[
    Optional[int],  # noqa: UP045
    typer.Option(
        "--capacity",
        help="Fail if the BFC allocator model runs out of memory with this much (16GiB, "
        "800MB, bytes): the run would not fit it.",
        **_CAPACITY,
    ),
]
Tpu = Annotated[
    Optional[list[Topology]],  # noqa: UP045
    typer.Option(
        "--tpu",
        metavar="SLICE",
        parser=options.topology,
        help="Compile the run's programs for this TPU slice (a Cloud name: v5e-8, v5p-8, "
        "v6e-256; or chips per axis: v5e:2x4, v5p:2x2x2) with XLA:TPU, ahead of time, on "
        "this machine (needs libtpu: tpumem install-libtpu): whether it fits, against "
        "XLA:TPU's own limit per chip, and what each program needs. Repeat for several.",
        show_default=False,
    ),
]
Force = Annotated[
    bool,
    typer.Option("--force", help="Replace an existing trace at the output path."),
]
# A report replaces an earlier report of tpumem's by itself (tpumem/outputs.py).
# The text report's rest: without it, the terminal gets the answer alone.
Full = Annotated[
    bool,
    typer.Option(
        "--full",
        help="The whole text report: the run's facts, every figure and how it is known, "
        "the buffers and call stacks at the peak, the timeline, each accelerator "
        "[default: the answer alone; a file, -o, gets it all].",
    ),
]
ReportForce = Annotated[
    bool,
    typer.Option("--force", help="Let -o replace a file that is not a report of tpumem's."),
]
# report's and diff's: the format, else the one -o's extension names.
PageFormat = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "--format",
        "-f",
        metavar="FORMAT",
        help=f"{either(formats(REPORT))} (default: from -o's extension, else text).",
    ),
]


def file_name(value: str) -> Path:
    """An output file's name as given: a trailing slash names a directory, which
    Path would drop (`-o new/` wrote a file named `new`)."""
    from tpumem.outputs import no_bucket

    unnamed = no_bucket(value)  # (before the slash: `s3://` names no directory either)
    if unnamed is not None:
        raise typer.BadParameter(unnamed)
    if value.endswith(("/", os.sep)):
        raise typer.BadParameter(f"{value}: names a directory; give a file name")
    return Path(value)


Output = Annotated[
    Optional[Path],  # noqa: UP045
    typer.Option("-o", "--output", metavar="FILE", help="Write it to this file.", parser=file_name),
]


# The script a command runs (profile) or compiles (fit), its arguments, or -m.
Script = Annotated[
    Optional[str],  # noqa: UP045
    typer.Argument(
        metavar="SCRIPT",
        help="The script (or, with -m, its first argument).",
        show_default=False,
    ),
]
ScriptArgs = Annotated[
    Optional[list[str]],  # noqa: UP045
    typer.Argument(metavar="ARGS", help="Arguments for the script.", show_default=False),
]
Module = Annotated[
    Optional[str],  # noqa: UP045
    typer.Option(
        "-m", metavar="MODULE", help="A module, as `python -m` runs it.", show_default=False
    ),
]
