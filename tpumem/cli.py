"""The `tpumem` command. Imports nothing heavy at start-up: each command imports
what it needs, and no command here imports a framework."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from tpumem import __version__
from tpumem.errors import TpumemError

app = typer.Typer(
    name="tpumem",
    help="Device-memory profiler for JAX, TensorFlow and PyTorch/XLA: preallocation, "
    "peak use and fragmentation, in the same terms for all three.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"tpumem {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Device-memory profiler for JAX, TensorFlow and PyTorch/XLA."""


@contextmanager
def _progress(message: str):
    """A spinner on stderr while long work runs, only when a person is watching."""
    if sys.stderr.isatty():
        from rich.console import Console

        with Console(stderr=True).status(message):
            yield
    else:
        yield


def _default_output(source: Path, run: str, host: str, hosts: int) -> Path:
    stem = run if source.is_dir() else host
    return Path(f"{stem}.{host}.tpumem" if hosts > 1 else f"{stem}.tpumem")


@app.command("import")
def import_command(
    path: Annotated[
        Path, typer.Argument(help="An .xplane.pb file, or a TensorBoard logdir holding them.")
    ],
    output: Annotated[
        Optional[Path],  # noqa: UP045 - typer reads the annotation at run time
        typer.Option("-o", "--output", help="Trace file to write (several hosts: one each)."),
    ] = None,
    run: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--run", help="Which run of a logdir (default: the newest)."),
    ] = None,
) -> None:
    """Import the allocator events of XSpace profiles written by TensorFlow's, JAX's or
    PyTorch/XLA's profiler (one trace file per host)."""
    from tpumem.importer import find_profiles, import_profile

    run_name, hosts = find_profiles(path, run)
    for host in hosts:
        if output is None:
            target = _default_output(path, run_name, host.host, len(hosts))
        elif len(hosts) > 1:
            target = output.with_name(f"{output.stem}.{host.host}{output.suffix or '.tpumem'}")
        else:
            target = output
        with _progress(f"importing {host.path}"):
            count = import_profile(host, target, run_name)
        typer.echo(f"{target}: {count:,} memory events from {host.path}")


@app.command()
def report(
    trace: Annotated[Path, typer.Argument(help="A trace file (.tpumem).")],
    fmt: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--format", "-f", help="text, json or md (default: from -o, else text)."),
    ] = None,
    output: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("-o", "--output", help="Write the report to this file."),
    ] = None,
    width: Annotated[int, typer.Option(help="Width of the text report.")] = 100,
) -> None:
    """Report peak use, preallocation and fragmentation of a trace."""
    from tpumem.analysis import analyze
    from tpumem.report import format_for, render
    from tpumem.trace.reader import load

    chosen = format_for(output, fmt)
    with _progress(f"analysing {trace}"):
        analysis = analyze(load(trace))
    color = output is None and sys.stdout.isatty()
    text = render(analysis, chosen, width=width, color=color)
    if output is None:
        sys.stdout.write(text)
    else:
        try:
            output.write_text(text)
        except OSError as error:
            raise TpumemError(f"{output}: cannot write: {error.strerror}") from None
        typer.echo(f"wrote {output}")


def main() -> None:
    """Entry point: user errors end in one line on stderr and a non-zero status."""
    try:
        app()
    except TpumemError as error:
        print(f"tpumem: error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
