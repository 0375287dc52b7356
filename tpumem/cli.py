"""The `tpumem` command line: each command's options, and the call to what the
command does (tpumem/commands/, one module each). Imports nothing heavy at
start-up; no command imports a framework. User errors end in one line."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from pathlib import Path
from typing import Annotated, NoReturn, Optional

import typer
from typer import core as typer_core

from tpumem import __version__, cli_tpu
from tpumem.cli_options import (
    Capacity,
    CheckCapacity,
    Force,
    Full,
    Module,
    Output,
    PageFormat,
    ReportForce,
    Script,
    ScriptArgs,
    Tpu,
    Width,
    either,
    file_name,
    finite,
)
from tpumem.commands import options
from tpumem.commands.options import DEFAULT_NOISE_BYTES, DEFAULT_WIDTH, Increase
from tpumem.errors import TpumemError
from tpumem.report import COMPARISON, REPORT, formats

# typer writes each parameter's Python type into the help (<path>, <float range>,
# <bool>); tpumem's help shows the metavar each option is given (FILE, SECONDS), as
# click does, and arguments by their names.
typer_core.TyperOption.display_type_rich = lambda self, ctx: self.metavar or ""  # type: ignore[attr-defined]
typer_core.TyperArgument.display_type_rich = lambda self, ctx: None  # type: ignore[attr-defined]

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


@app.command(
    "import", short_help="Import XSpace profiles (.xplane.pb) or PyTorch memory snapshots."
)
def import_command(
    path: Annotated[
        Path,
        typer.Argument(
            help="An .xplane.pb file, a TensorBoard logdir holding them, or a PyTorch memory "
            "snapshot (.pickle, from torch.cuda.memory._dump_snapshot)."
        ),
    ],
    output: Annotated[
        Optional[Path],  # noqa: UP045 - typer reads the annotation at run time
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help="Trace file to write (several hosts: one each).",
            parser=file_name,
        ),
    ] = None,
    run: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option("--run", metavar="NAME", help="Which run of a logdir (default: the newest)."),
    ] = None,
    force: Force = False,
) -> None:
    """Import the allocator events of XSpace profiles written by TensorFlow's, JAX's or
    PyTorch/XLA's profiler (one trace file per host), or a PyTorch CUDA memory
    snapshot. Without -o, the trace is named after the run (or file), numbered if
    that name is taken."""
    from tpumem.commands.import_ import run_import
    from tpumem.commands.requests import ImportRequest

    run_import(ImportRequest(path=path, output=output, run=run, force=force))


@app.command(short_help="Report peak use, preallocation and fragmentation.")
def report(
    traces: Annotated[
        list[Path],
        typer.Argument(
            metavar="TRACE",
            help="A trace file (.tpumem); or a run: its directory, or its processes' traces.",
            show_default=False,
        ),
    ],
    fmt: PageFormat = None,
    output: Output = None,
    width: Width = DEFAULT_WIDTH,
    full: Full = False,
    force: ReportForce = False,
    capacity: Capacity = None,
    program: Annotated[
        Optional[str],  # noqa: UP045
        typer.Option(
            metavar="NAME",
            help="One compiled program in full: every buffer live at its peak and its heap "
            "over program order (NAME: the module, e.g. jit_train_step, or part of it).",
        ),
    ] = None,
    tpu: Tpu = None,
) -> None:
    """Report peak use, preallocation and fragmentation of a trace, and what fills
    each compiled program. For a distributed run (a directory of traces, or several
    traces): each process's figures, their spread, and the busiest process in full."""
    from tpumem.commands.report import run_report
    from tpumem.commands.requests import Page, ReportRequest

    page = Page(fmt=fmt, output=output, width=width, force=force, full=full)
    request = ReportRequest(
        paths=tuple(traces), page=page, capacity=capacity, program=program, tpu=tuple(tpu or ())
    )
    run_report(request)


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
            parser=file_name,
            help="Also write the comparison as a self-contained HTML page.",
        ),
    ] = None,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            metavar="FORMAT",
            help=f"{either(formats(COMPARISON, terminal=True))}.",
        ),
    ] = "text",
    output_dir: Annotated[
        Path, typer.Option(metavar="DIR", help="Where the traces of profiled scripts go.")
    ] = Path("."),
    width: Width = DEFAULT_WIDTH,
    force: Annotated[
        bool,
        typer.Option("--force", help="Let --html replace a file that is not a page of tpumem's."),
    ] = False,
    capacity: Capacity = None,
    tpu: Tpu = None,
) -> None:
    """Compare runs side by side: the same model in JAX, TensorFlow and PyTorch/XLA.

    The first run is the reference for ratios; the lowest value of each row is
    marked. Scripts are profiled one after the other, each in its own process.
    """
    from tpumem.commands.compare import run_compare
    from tpumem.commands.requests import CompareRequest

    run_compare(
        CompareRequest(
            runs=tuple(runs),
            fmt=fmt,
            html=html,
            output_dir=output_dir,
            width=width,
            force=force,
            capacity=capacity,
            tpu=tuple(tpu or ()),
        )
    )


@app.command(short_help="What changed between two runs of one program.")
def diff(
    before: Annotated[Path, typer.Argument(metavar="BEFORE", help="A trace file (.tpumem).")],
    after: Annotated[Path, typer.Argument(metavar="AFTER", help="A trace file of a later run.")],
    fmt: PageFormat = None,
    output: Output = None,
    noise: Annotated[
        int,
        typer.Option(
            metavar="SIZE",
            parser=options.size,
            show_default=False,
            help="Changes of live bytes at the peak up to this are noise, not listed "
            "(default: 64KiB).",
        ),
    ] = DEFAULT_NOISE_BYTES,
    width: Width = DEFAULT_WIDTH,
    force: ReportForce = False,
) -> None:
    """Two runs of one program (two versions, two settings): the change of each
    device's peak, pool and fragmentation, and of the bytes live at the peak by
    line, call stack, op and region. Lines are matched by their code, so lines
    that moved are still the same line.
    """
    from tpumem.commands.diff import run_diff
    from tpumem.commands.requests import DiffRequest, Page

    page = Page(fmt=fmt, output=output, width=width, force=force)
    run_diff(DiffRequest(before=before, after=after, page=page, noise_bytes=noise))


@app.command(short_help="Check a run against limits, for CI.")
def check(
    traces: Annotated[
        list[Path],
        typer.Argument(
            metavar="TRACE",
            help="A trace file (.tpumem); or a run: its directory, or its processes' traces "
            "(every process is checked).",
            show_default=False,
        ),
    ],
    max_peak: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            metavar="SIZE",
            parser=options.size,
            help="Largest peak in use allowed on any device: 12GiB, 800MB, bytes.",
        ),
    ] = None,
    max_fragmentation: Annotated[
        Optional[float],  # noqa: UP045
        typer.Option(
            help="Largest fragmentation allowed at the peak, 0..1.",
            metavar="F",
            callback=finite,
            min=0.0,
            max=1.0,
        ),
    ] = None,
    capacity: CheckCapacity = None,
    max_growth: Annotated[
        Optional[int],  # noqa: UP045
        typer.Option(
            metavar="SIZE",
            parser=options.size,
            help="Largest growth a step allowed in the bytes that stay from step to step, "
            "after warm-up (needs step marks).",
        ),
    ] = None,
    baseline: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(metavar="OLD", help="A trace of an earlier run: fail if a peak rose over it."),
    ] = None,
    max_increase: Annotated[
        Optional[Increase],  # noqa: UP045
        typer.Option(
            metavar="SHARE|SIZE",
            parser=options.share_or_size,
            help="How much a peak may rise over --baseline's: 5%, 64MiB (default: 0).",
        ),
    ] = None,
    max_imbalance: Annotated[
        Optional[Increase],  # noqa: UP045
        typer.Option(
            metavar="SHARE|SIZE",
            parser=options.share_or_size,
            help="A run's processes: how far the lowest peak may fall below the highest, "
            "as a share of it (5%) or a size (64MiB).",
        ),
    ] = None,
    tpu: Tpu = None,
    trust_summaries: Annotated[
        bool,
        typer.Option(
            "--trust-summaries",
            help="A run's processes: judged by the summaries their recordings left beside "
            "the traces, not by the traces. Faster on a large pod; a summary anyone could "
            "have written decides the verdict.",
        ),
    ] = False,
) -> None:
    """Check a run against limits, for CI: exit status 1 and a line per breach."""
    from tpumem.commands.check import run_check
    from tpumem.commands.requests import CheckRequest

    request = CheckRequest(
        paths=tuple(traces),
        max_peak_bytes=max_peak,
        max_fragmentation=max_fragmentation,
        capacity=capacity,
        max_growth_bytes=max_growth,
        baseline=baseline,
        max_increase=max_increase,
        max_imbalance=max_imbalance,
        tpu=tuple(tpu or ()),
        trust_summaries=trust_summaries,
    )
    raise typer.Exit(run_check(request))


@app.command(
    short_help="Run a script and profile its device memory.",
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)
def profile(
    target: Script = None,
    args: ScriptArgs = None,
    module: Module = None,
    output: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            "-o",
            "--output",
            metavar="FILE",
            help="Trace file (default: <script>.tpumem here, numbered if taken); "
            "{host}, {rank} and {pid} in it are filled in by each process. With "
            "--follow, the run's directory (default: <script>-run).",
        ),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            help="Record every process the script starts that imports a framework "
            "(multiprocessing, subprocess, torchrun, torch_xla.launch), a trace each in "
            "the run's directory; then report the run.",
        ),
    ] = False,
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
            callback=finite,
            min=0.001,
            max=60.0,
        ),
    ] = 0.01,
    chunk: Annotated[
        float,
        typer.Option(
            help="Seconds per profiler session: the most a killed run loses.",
            metavar="SECONDS",
            callback=finite,
            min=0.05,
            max=3600.0,
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
    programs: Annotated[
        bool,
        typer.Option(
            help="Record each compiled program's HLO and buffer assignment (XLA's dump, "
            "added to your XLA_FLAGS): what fills each program. On by default.",
            show_default=False,
        ),
    ] = True,
    stacks: Annotated[
        bool,
        typer.Option(
            help="Record each buffer's Python call stack (off: its source line only). "
            "On by default.",
            show_default=False,
        ),
    ] = True,
    native_frames: Annotated[
        bool,
        typer.Option(
            "--native-frames",
            help="Keep the frameworks' and libraries' frames in each buffer's call stack "
            "(default: your code's frames only).",
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No report, no messages.")] = False,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            metavar="FORMAT",
            help=f"Report format: {either(formats(REPORT, terminal=True))}.",
        ),
    ] = "text",
    width: Width = DEFAULT_WIDTH,
    full: Full = False,
    force: Force = False,
    tensorboard: Annotated[
        Optional[Path],  # noqa: UP045
        typer.Option(
            metavar="DIR", help="Also export the trace to this TensorBoard log directory."
        ),
    ] = None,
    tpu: Tpu = None,
) -> None:
    """Run a script under its framework's adapter, write a trace, print a report.

    Options go before the script; everything after it is the script's. The script's
    input and output pass through, and tpumem exits with its exit status (128 + N
    when signal N killed it). The report goes to stderr.
    """
    from tpumem.adapters import CaptureOptions
    from tpumem.commands.profile import run_profile
    from tpumem.commands.requests import ProfileRequest

    capture = CaptureOptions(
        sample_interval_s=sample_interval,
        chunk_s=chunk,
        cpu_allocator_events=cpu_allocator_events,
        programs=programs,
        stacks=stacks,
        native_frames=native_frames,
    )
    request = ProfileRequest(
        target=target,
        args=tuple(args or ()),
        module=module,
        output=output,
        framework=framework,
        capture=capture,
        quiet=quiet,
        fmt=fmt,
        width=width,
        full=full,
        force=force,
        tensorboard=tensorboard,
        tpu=tuple(tpu or ()),
        follow=follow,
    )
    raise typer.Exit(run_profile(request))


export_app = typer.Typer(
    help="Export traces for other tools.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(export_app, name="export")


@export_app.command("tensorboard", short_help="Write traces where TensorBoard (XProf) shows them.")
def export_tensorboard_command(
    traces: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN",
            help="Trace files (.tpumem), or a distributed run's directory.",
            show_default=False,
        ),
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
    from tpumem.commands.export import run_export
    from tpumem.commands.requests import ExportRequest

    run_export(ExportRequest(paths=tuple(traces), logdir=logdir, run=run, force=force))


@app.command(short_help="Watch a run's memory while another process writes its trace.")
def watch(
    trace: Annotated[
        Path, typer.Argument(metavar="TRACE", help="The trace (.tpumem) being written.")
    ],
    interval: Annotated[
        float,
        typer.Option(
            metavar="SECONDS", help="How often the figures are read again.", min=0.05, max=60
        ),
    ] = 0.5,
) -> None:
    """Follow a trace while another process writes it (`tpumem profile -o TRACE` in
    another terminal, or on a host whose disk this one shares): bytes in use, the
    peak so far and the line that reached it, and a chart, until the run ends; then
    its peak from the whole trace. A trace not yet there is waited for."""
    from tpumem.commands.watch import run_watch

    run_watch(trace, interval)


# The TPU slice commands: their options are declared in cli_tpu.py.
app.command(
    "fit",
    short_help="Will the script fit on a TPU slice: compiled by XLA:TPU, never run.",
    context_settings={"allow_interspersed_args": False, "ignore_unknown_options": True},
)(cli_tpu.fit)
app.command("install-libtpu", short_help="Install XLA:TPU for --tpu, for tpumem alone.")(
    cli_tpu.install_libtpu
)


def _fail(message: str, code: int = 2) -> NoReturn:
    from tpumem.report.escapes import visible

    print(f"tpumem: error: {visible(message)}", file=sys.stderr)
    sys.exit(code)


def main() -> None:
    """Entry point: user errors end in one line on stderr and a non-zero status."""
    from typer._click import exceptions as click_errors

    from tpumem.heap import keep_freed_memory

    keep_freed_memory()  # (before any command makes its arrays)
    if sys.stdout is None:  # started with its standard output closed (`>&-`)
        sys.stdout = _ClosedOutput()
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
    except MemoryError:  # (what was written before stays; the machine had no more)
        _fail("out of memory: this machine has too little for the work asked", 1)
    except (KeyboardInterrupt, typer.Abort):
        sys.exit(130)
    except OSError as error:
        _output_failed(error)
    sys.exit(code or 0)


def run() -> NoReturn:
    """The `tpumem` command: main(), then an exit that skips the interpreter's
    teardown, which unloads numpy, pyarrow and the analysis modules one object at
    a time (30-40 ms, a tenth of reporting a small profile) for a process that is
    ending anyway. Exit handlers still run and the output is flushed first; where
    a thread is still running, the exit is Python's own."""
    import atexit
    import threading

    try:
        main()
        code: str | int | None = 0
    except SystemExit as stop:
        code = stop.code
    if not isinstance(code, int | None) or threading.active_count() > 1:
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:
        os._exit(120)  # the status Python's own exit gives when its flush fails
    os._exit(code or 0)


class _ClosedOutput(io.TextIOBase):
    """Standard output when the process got none: writing to it is the error a
    closed descriptor gives (a command with -o never writes to it)."""

    def write(self, text: str) -> int:
        import errno

        raise OSError(errno.EBADF, "standard output is closed")

    def isatty(self) -> bool:
        return False


def _output_failed(error: OSError) -> NoReturn:
    """Standard output closed or full (a pipe to `head`, /dev/full): say so once, and
    let nothing else try to write to it at exit."""
    import errno

    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):  # (no descriptor: _ClosedOutput)
        os.dup2(devnull, sys.stdout.fileno())
    if error.errno == errno.EPIPE:
        sys.exit(1)
    _fail(f"cannot write the output: {error.strerror or error}")
