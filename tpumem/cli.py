"""The `tpumem` command. Imports nothing heavy at start-up: each command imports
what it needs, and no command here imports a framework."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn, Optional

import typer
from typer import core as typer_core

from tpumem import __version__
from tpumem.errors import TpumemError

if TYPE_CHECKING:
    from tpumem.report import Reporter

# typer writes each parameter's Python type into the help (<path>, <float range>,
# <bool>); tpumem's help shows the metavar each option is given (FILE, SECONDS), as
# click does, and arguments by their names.
typer_core.TyperOption.display_type_rich = lambda self, ctx: self.metavar or ""  # type: ignore[method-assign]
typer_core.TyperArgument.display_type_rich = lambda self, ctx: None  # type: ignore[method-assign]

app = typer.Typer(
    name="tpumem",
    help="Device-memory profiler for JAX, TensorFlow and PyTorch/XLA: preallocation, "
    "peak use and fragmentation, in the same terms for all three.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
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


def _finite(value: float | None) -> float | None:
    import math

    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


# The text report's width in columns: narrower cannot hold its tables, wider is
# more than any terminal shows.
Width = Annotated[
    int,
    typer.Option(help="Width of the text report, in columns.", min=40, max=1000, metavar="N"),
]
Force = Annotated[
    bool,
    typer.Option("--force", help="Replace an existing trace at the output path."),
]


def _default_output(source: Path, run: str, host: str, hosts: int) -> Path:
    stem = run if source.is_dir() else host
    return Path(f"{stem}.{host}.tpumem" if hosts > 1 else f"{stem}.tpumem")


@app.command("import", short_help="Import XSpace profiles (.xplane.pb) as traces.")
def import_command(
    path: Annotated[
        Path, typer.Argument(help="An .xplane.pb file, or a TensorBoard logdir holding them.")
    ],
    output: Annotated[
        Optional[Path],  # noqa: UP045 - typer reads the annotation at run time
        typer.Option(
            "-o", "--output", metavar="FILE", help="Trace file to write (several hosts: one each)."
        ),
    ] = None,
    run: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--run", metavar="NAME", help="Which run of a logdir (default: the newest)."),
    ] = None,
    force: Force = False,
) -> None:
    """Import the allocator events of XSpace profiles written by TensorFlow's, JAX's or
    PyTorch/XLA's profiler (one trace file per host). Without -o, the trace is named
    after the run (or file), numbered if that name is taken."""
    from tpumem.importer import find_profiles, import_profile
    from tpumem.outputs import check_target, create_trace, default_trace

    run_name, hosts = find_profiles(path, run)
    inputs = [host.path for host in hosts]
    targets = []
    for host in hosts:
        if output is None:
            targets.append(None)
            continue
        if len(hosts) > 1:
            target = output.with_name(f"{output.stem}.{host.host}{output.suffix or '.tpumem'}")
        else:
            target = output
        if check_target(target, inputs) and not force:  # before any work is done
            raise TpumemError(f"{target}: exists; use --force to replace it, or -o another name")
        targets.append(target)
    for host, target in zip(hosts, targets, strict=True):
        default = _default_output(path, run_name, host.host, len(hosts))

        def create(target: Path | None = target, default: Path = default) -> tuple[Path, int]:
            if target is None:
                return default_trace(default, inputs)
            return target, create_trace(target, inputs, force)

        with _progress(f"importing {host.path}"):
            written, count = import_profile(host, run_name, create)
        typer.echo(f"{written}: {count:,} memory events from {host.path}")


@app.command(short_help="Report peak use, preallocation and fragmentation.")
def report(
    trace: Annotated[Path, typer.Argument(help="A trace file (.tpumem).")],
    fmt: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "--format",
            "-f",
            metavar="FORMAT",
            help="text, json, md or html (default: from -o, else text).",
        ),
    ] = None,
    output: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option("-o", "--output", metavar="FILE", help="Write the report to this file."),
    ] = None,
    width: Width = 100,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a trace at the output path.")
    ] = False,
) -> None:
    """Report peak use, preallocation and fragmentation of a trace."""
    from tpumem.analysis import analyze
    from tpumem.report import reporter_for
    from tpumem.trace.reader import load

    reporter = reporter_for(output, fmt)
    with _progress(f"analysing {trace}"):
        analysis = analyze(load(trace), series_points=reporter.series_points)
    color = output is None and sys.stdout.isatty()
    _emit(reporter.render(analysis, width=width, color=color), output, [trace], force)


def _emit(text: str, output: Path | None, inputs: list[Path], force: bool) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    from tpumem.outputs import write_report

    write_report(output, text, inputs, force)
    print(f"tpumem: wrote {output}", file=sys.stderr)


@app.command(short_help="Compare runs side by side (scripts are profiled first).")
def compare(
    runs: Annotated[
        list[str],
        typer.Argument(
            metavar="RUN",
            help="Trace files, or scripts to profile first (with arguments, quoted as one: "
            '"train.py --steps 30").',
            show_default=False,
        ),
    ],
    html: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "--html",
            metavar="FILE",
            help="Also write the comparison as a self-contained HTML page.",
        ),
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", "-f", metavar="FORMAT", help="text or json.")
    ] = "text",
    output_dir: Annotated[
        Path, typer.Option(metavar="DIR", help="Where the traces of profiled scripts go.")
    ] = Path("."),
    width: Width = 100,
    force: Annotated[
        bool, typer.Option("--force", help="Let --html replace a trace at its path.")
    ] = False,
) -> None:
    """Compare runs side by side: the same model in JAX, TensorFlow and PyTorch/XLA.

    The first run is the reference for ratios; the lowest value of each row is
    marked. Scripts are profiled one after the other, each in its own process.
    """
    if fmt not in ("text", "json"):
        raise TpumemError(f"unknown compare format {fmt!r} (choose from text, json)")
    if len(runs) < 2:
        raise TpumemError("compare needs at least two runs")
    from tpumem.analysis import analyze
    from tpumem.analysis.comparison import compare as compare_runs
    from tpumem.compare_runs import profile_scripts, resolve
    from tpumem.report import HTML_SERIES_POINTS
    from tpumem.trace.reader import load

    sources = resolve(runs, output_dir)
    profile_scripts(sources)
    points = HTML_SERIES_POINTS if html else 0  # only the page draws series
    analyses = []
    for source in sources:
        with _progress(f"analysing {source.trace}"):
            analyses.append(analyze(load(source.trace), series_points=points))
    comparison = compare_runs(analyses)
    if fmt == "json":
        from tpumem.report.compare_json import render_compare_json

        sys.stdout.write(render_compare_json(comparison))
    else:
        from tpumem.report.compare_text import render_compare_text

        sys.stdout.write(render_compare_text(comparison, width=width, color=sys.stdout.isatty()))
    if html is not None:
        from tpumem.report.html import render_compare_html

        _emit(render_compare_html(comparison), html, [s.trace for s in sources], force)


@app.command(short_help="Check a run against limits, for CI.")
def check(
    trace: Annotated[Path, typer.Argument(help="A trace file (.tpumem).")],
    max_peak: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            metavar="SIZE", help="Largest peak in use allowed on any device: 12GiB, 800MB, bytes."
        ),
    ] = None,
    max_fragmentation: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(
            help="Largest fragmentation allowed at the peak, 0..1.",
            metavar="F",
            min=0.0,
            max=1.0,
            callback=_finite,
        ),
    ] = None,
) -> None:
    """Check a run against limits, for CI: exit status 1 and a line per breach."""
    from tpumem.analysis import analyze
    from tpumem.check import Limits, breaches
    from tpumem.trace.reader import load
    from tpumem.units import parse_bytes

    if max_peak is None and max_fragmentation is None:
        raise TpumemError("nothing to check: give --max-peak and/or --max-fragmentation")
    try:
        peak_bytes = None if max_peak is None else parse_bytes(max_peak)
    except ValueError as error:
        raise TpumemError(f"--max-peak: {error}") from None
    found = breaches(analyze(load(trace)), Limits(peak_bytes, max_fragmentation))
    for line in found:
        print(f"tpumem: breach: {line}", file=sys.stderr)
    if found:
        raise typer.Exit(1)
    typer.echo(f"{trace}: within the limits")


@app.command(
    short_help="Run a script and profile its device memory.",
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)
def profile(
    target: Annotated[
        Optional[str],  # noqa: UP045
        typer.Argument(
            metavar="SCRIPT",
            help="The script to run (or, with -m, its first argument).",
            show_default=False,
        ),
    ] = None,
    args: Annotated[
        Optional[list[str]],  # noqa: UP045
        typer.Argument(metavar="ARGS", help="Arguments for the script.", show_default=False),
    ] = None,
    module: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            "-m", metavar="MODULE", help="Run a module as `python -m` does.", show_default=False
        ),
    ] = None,
    output: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help="Trace file (default: <script>.tpumem here, numbered if taken).",
        ),
    ] = None,
    framework: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            metavar="NAME",
            help="tensorflow, jax or torch_xla (default: from the script's imports).",
        ),
    ] = None,
    sample_interval: Annotated[
        float,
        typer.Option(
            help="Seconds between readings of the allocator's counters.",
            metavar="SECONDS",
            min=0.001,
            max=60.0,
            callback=_finite,
        ),
    ] = 0.01,
    chunk: Annotated[
        float,
        typer.Option(
            help="Seconds per profiler session: the most a killed run loses.",
            metavar="SECONDS",
            min=0.05,
            max=3600.0,
            callback=_finite,
        ),
    ] = 1.0,
    cpu_allocator_events: Annotated[
        bool,
        typer.Option(
            help="TensorFlow on CPU: set TF_CPU_ALLOCATOR_USE_BFC=true so the CPU "
            "allocator records events (without it: no CPU memory figures). On by default.",
            show_default=False,
        ),
    ] = True,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No report, no messages.")] = False,
    fmt: Annotated[
        str,
        typer.Option("--format", "-f", metavar="FORMAT", help="Report format: text, json or md."),
    ] = "text",
    width: Width = 100,
    force: Force = False,
    tensorboard: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            metavar="DIR", help="Also export the trace to this TensorBoard log directory."
        ),
    ] = None,
) -> None:
    """Run a script under its framework's adapter, write a trace, print a report.

    Options go before the script; everything after it is the script's. The script's
    input and output pass through, and tpumem exits with its exit status (128 + N
    when signal N killed it). The report goes to stderr.
    """
    from tpumem.adapters import CaptureOptions
    from tpumem.launcher import ProfileRequest, run_profiled
    from tpumem.report import reporter_for

    rest = list(args or [])
    if module is None and target is None:
        raise TpumemError("no script given: tpumem profile [OPTIONS] script.py [ARGS]...")
    if module is not None and target is not None:
        rest = [target, *rest]
    reporter = reporter_for(None, fmt)
    if not reporter.terminal:
        raise TpumemError(
            f"profile reports to the terminal: for {fmt}, tpumem report RUN -o FILE.{fmt}"
        )
    request = ProfileRequest(
        target=module if module is not None else str(target),
        module=module is not None,
        args=rest,
        output=output,
        framework=framework,
        force=force,
        capture=CaptureOptions(
            sample_interval_s=sample_interval,
            chunk_s=chunk,
            cpu_allocator_events=cpu_allocator_events,
        ),
    )
    outcome = run_profiled(request)
    if outcome.adapter_failed:  # the script never ran; the runner said why
        raise typer.Exit(2)
    if not quiet or tensorboard is not None:
        _after_profile(outcome.trace, None if quiet else reporter, width, tensorboard)
    raise typer.Exit(outcome.returncode)


def _after_profile(trace: Path, reporter: Reporter | None, width: int, logdir: Path | None) -> None:
    """The report and the export of a profiled run, from one analysis of its trace.
    The run and its trace stand whatever happens here; a failure is one line."""
    from tpumem.analysis.summary import analyze_with_events
    from tpumem.trace.reader import load

    try:
        loaded = load(trace)
        analysis, figures = analyze_with_events(loaded)
    except TpumemError as error:
        print(f"tpumem: no report: {error}", file=sys.stderr)
        return
    if reporter is not None:
        color = sys.stderr.isatty()
        sys.stderr.write(reporter.render(analysis, width=width, color=color))
        print(f"tpumem: trace written to {trace}", file=sys.stderr)
    if logdir is not None:
        from tpumem.export.tensorboard import export_loaded

        try:
            _exported(export_loaded([(trace, loaded, figures)], logdir))
        except TpumemError as error:
            print(f"tpumem: no TensorBoard export: {error}", file=sys.stderr)


export_app = typer.Typer(
    help="Export traces for other tools.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(export_app, name="export")


@export_app.command("tensorboard", short_help="Write traces where TensorBoard (XProf) shows them.")
def export_tensorboard_command(
    traces: Annotated[
        list[Path], typer.Argument(metavar="RUN", help="Trace files (.tpumem).", show_default=False)
    ],
    logdir: Annotated[Path, typer.Option(metavar="DIR", help="TensorBoard's log directory.")],
    run: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            metavar="NAME",
            help="Run name (default: the trace's name; imported hosts: their run).",
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Replace a profile the run already has.")
    ] = False,
) -> None:
    """Write traces where TensorBoard shows them: XProf's Memory Profile tool and
    scalars per device (bytes in use, pool, fragmentation). Then: tensorboard
    --logdir DIR. Needs neither TensorFlow nor TensorBoard to write."""
    _export(traces, logdir, run, force)


def _export(traces: list[Path], logdir: Path, run: str | None, force: bool = False) -> None:
    from tpumem.export.tensorboard import export_tensorboard

    with _progress(f"exporting to {logdir}"):
        _exported(export_tensorboard(traces, logdir, run, force))


def _exported(exported: list) -> None:
    for item in exported:
        files = ", ".join(str(p) for p in (*item.xplanes, *item.scalars))
        print(f"tpumem: run {item.run}: {files}", file=sys.stderr)


def _fail(message: str, code: int = 2) -> NoReturn:
    from tpumem.report.visible import visible

    print(f"tpumem: error: {visible(message)}", file=sys.stderr)
    sys.exit(code)


def main() -> None:
    """Entry point: user errors end in one line on stderr and a non-zero status."""
    from typer._click import exceptions as click_errors

    try:
        code = app(standalone_mode=False, prog_name="tpumem")
        sys.stdout.flush()
    except click_errors.NoArgsIsHelpError as shown:
        text = shown.ctx.get_help()  # rich prints it and returns nothing
        if text:
            print(text)
        sys.exit(shown.exit_code)
    except click_errors.UsageError as error:  # a bad option or value: one line, and where to look
        where = f" (see {error.ctx.command_path} --help)" if error.ctx is not None else ""
        _fail(error.format_message() + where, error.exit_code)
    except click_errors.ClickException as error:
        _fail(error.format_message(), error.exit_code)
    except TpumemError as error:
        _fail(str(error), error.exit_code)
    except (KeyboardInterrupt, typer.Abort):
        sys.exit(130)
    except OSError as error:
        _output_failed(error)
    sys.exit(code or 0)


def _output_failed(error: OSError) -> NoReturn:
    """Standard output closed or full (a pipe to `head`, /dev/full): say so once, and
    let nothing else try to write to it at exit."""
    import errno
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    if error.errno == errno.EPIPE:
        sys.exit(1)
    _fail(f"cannot write the output: {error.strerror or error}")
