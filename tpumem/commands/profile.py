"""`tpumem profile`: run a script under its framework's adapter, then report."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tpumem.commands.options import text_width
from tpumem.commands.requests import ProfileRequest
from tpumem.commands.tpu_compiles import compile_for_tpus
from tpumem.commands.unrecorded import unrecorded_line
from tpumem.commands.uploading import (
    check_logdir,
    logdir_written,
    upload_traces,
    written_here,
)
from tpumem.errors import TpumemError
from tpumem.storage.uploads import run_directory, tidy, url_of_copy
from tpumem.units import counted

if TYPE_CHECKING:
    from tpumem.analysis.processes import ProcessRun
    from tpumem.launch.launcher import LaunchRequest
    from tpumem.launch.status_line import LiveView
    from tpumem.report import Reporter
    from tpumem.tpu.topology import Topology


def run_profile(request: ProfileRequest) -> int:
    """The exit status: the script's (128 + N when signal N killed it), 2 when it
    was not recorded: the adapter failed (the runner said why), or the script
    imported no framework."""
    from tpumem.adapters import CaptureOptions
    from tpumem.launch.launcher import LaunchRequest
    from tpumem.report import reporter_for

    target, module, follow, tpu = request.target, request.module, request.follow, request.tpu
    capture = request.capture or CaptureOptions()
    rest = list(request.args)
    if module is None and target is None:
        raise TpumemError("no script given: tpumem profile [OPTIONS] script.py [ARGS]...")
    if (
        module is None
        and target is not None
        and target.startswith("-")
        and not Path(target).exists()
    ):
        # (Options tpumem does not know pass through to the script, after it.)
        raise TpumemError(
            f"no such option: {target} (see tpumem profile --help); the script's own "
            "options go after the script"
        )
    if module is not None and target is not None:
        rest = [target, *rest]
    if follow:
        _check_follow_options(request.framework, request.tensorboard, tpu)
    if tpu and not capture.programs:
        raise TpumemError("--tpu compiles the programs the run records: drop --no-programs")
    fmt = request.fmt
    reporter = reporter_for(None, fmt)
    if not reporter.terminal:
        raise TpumemError(
            f"profile reports to the terminal: for {fmt}, tpumem report RUN -o FILE.{fmt}"
        )
    # (bound for object storage: written on this machine as the run goes, put there after)
    output = written_here(request.output, request.force, directory=follow)
    check_logdir(request.tensorboard)
    bound = None if output == request.output else url_of_copy(output) if output else None
    if output is not None and bound is not None:
        # (said first: a tpumem killed on the way says nothing after)
        from tpumem.report.escapes import visible

        print(
            f"tpumem: writing here first, at {visible(str(output))}; put at "
            f"{visible(bound)} when the run ends",
            file=sys.stderr,
        )
    launch = LaunchRequest(
        target=module if module is not None else str(target),
        module=module is not None,
        args=rest,
        output=output,
        framework=request.framework,
        force=request.force,
        capture=capture,
        follow=follow,
        live=_live_view() if not request.quiet and not follow and sys.stderr.isatty() else None,
    )
    if output is None or bound is None:
        return _profiled(launch, request, reporter)[0]
    try:
        returncode, traces = _profiled(launch, request, reporter)
    except KeyboardInterrupt:
        where = run_directory(output)
        print(
            f"tpumem: interrupted: nothing was put; what was written stays in {where}",
            file=sys.stderr,
        )
        raise
    finally:
        tidy(output)
    return _uploaded(traces, request, returncode)


def _profiled(
    launch: LaunchRequest, request: ProfileRequest, reporter: Reporter
) -> tuple[int, list[Path]]:
    """The run and what follows it here; the exit status, and the traces it
    left (to put where they are bound)."""
    from tpumem.launch.launcher import run_profiled

    fmt, tpu = request.fmt, request.tpu
    outcome = run_profiled(launch)
    left = _left(outcome.trace, launch.follow)
    if outcome.adapter_failed:
        return 2, left
    if launch.follow:
        assert outcome.trace is not None
        recorded = _after_followed_run(
            outcome.trace, request.quiet, fmt, text_width(request.width, sys.stderr), request.full
        )
        # (as a run without --follow that recorded nothing: 2, or the script's own status)
        return outcome.returncode or (0 if recorded else 2), _left(outcome.trace, True)
    if outcome.unrecorded is not None:
        print(f"tpumem: error: {unrecorded_line(launch.target, outcome)}", file=sys.stderr)
        return outcome.returncode or 2, left
    if outcome.lost:  # (the launcher said why)
        return outcome.returncode, left
    if outcome.trace is None:
        print("tpumem: the profiled process ended before it made its trace", file=sys.stderr)
        return outcome.returncode, left
    if outcome.trace.exists():
        # After the run, in a process of its own: the run's time is its own.
        compile_for_tpus([outcome.trace], tpu, request.quiet)
    quiet_or = None if request.quiet else reporter
    _after_run(
        outcome.trace,
        quiet_or,
        text_width(request.width, sys.stderr),
        request.tensorboard,
        request.full,
    )
    return outcome.returncode, _left(outcome.trace, False)


def _left(trace: Path | None, follow: bool) -> list[Path]:
    """The traces a run left: its own, or with --follow each in its directory."""
    if trace is None:
        return []
    if follow:
        return sorted(trace.glob("*.tpumem"))
    return [trace] if trace.exists() else []


def _uploaded(traces: list[Path], request: ProfileRequest, returncode: int) -> int:
    """The run's exit status, once its traces bound for object storage are there
    (2 for a run that succeeded where one could not be put: its copy here stays)."""
    try:
        failed = upload_traces(traces, request.force, say=not request.quiet)
    except KeyboardInterrupt:
        if traces:
            print(
                f"tpumem: interrupted: what was not put stays in {run_directory(traces[0])}",
                file=sys.stderr,
            )
        return 130
    for line in failed:
        print(f"tpumem: error: {line}", file=sys.stderr)
    return returncode or 2 if failed else returncode


def _live_view() -> LiveView:
    from tpumem.commands.live_view import follow

    return follow


def _check_follow_options(
    framework: str | None, tensorboard: Path | None, tpu: tuple[Topology, ...]
) -> None:
    if framework is not None:
        raise TpumemError("--follow finds each process's framework from what it imports")
    for option, given in (("--tensorboard", tensorboard), ("--tpu", tpu)):
        if given:
            raise TpumemError(
                f"{option} takes one trace: after the run, tpumem export tensorboard or "
                "tpumem report --tpu on the trace of the process you want"
            )


def _after_followed_run(directory: Path, quiet: bool, fmt: str, width: int, full: bool) -> bool:
    """The run's report, from every process's trace in its directory; whether
    any process recorded (none is an error, said in one line, as without --follow)."""
    from tpumem.commands.analysed_runs import analysed_processes
    from tpumem.report import PROCESSES, reporter

    traces = sorted(directory.glob("*.tpumem"))
    if not traces:
        print(
            "tpumem: error: no process of the run imported a framework tpumem profiles (jax, "
            f"tensorflow, torch_xla): nothing was recorded in {directory}",
            file=sys.stderr,
        )
        return False
    try:
        # (the summaries are written from this very analysis: none is there yet)
        run = analysed_processes(traces, str(directory), expect_summaries=False)
    except TpumemError as error:
        print(f"tpumem: no report: {error}", file=sys.stderr)
        return True
    _leave_summaries(run)
    if quiet:
        return True
    try:
        text = reporter(PROCESSES, fmt).render(
            run, width=width, color=sys.stderr.isatty(), full=full, where=str(directory)
        )
    except TpumemError as error:
        print(f"tpumem: no report: {error}", file=sys.stderr)
        return True
    sys.stderr.write(text)
    print(f"tpumem: {counted(len(traces), 'trace')} written to {directory}", file=sys.stderr)
    return True


def _leave_summaries(run: ProcessRun) -> None:
    """Each process's summary beside its trace, as the run's report made it (the
    summaries of a run read from summaries are there already)."""
    from dataclasses import replace

    from tpumem.reading.summary_files import write_summary

    for process in run.processes:
        if process.made_from != "trace" or process.running:  # (one still writing: not yet)
            continue
        trace = Path(process.path)
        try:
            write_summary(trace, replace(process, findings=()))
        except OSError as error:
            why = error.strerror or error
            print(f"tpumem: no summary written beside {trace}: {why}", file=sys.stderr)


def _after_run(
    trace: Path, reporter: Reporter | None, width: int, logdir: Path | None, full: bool
) -> None:
    """The summary beside the trace, the report and the export of a profiled run,
    from one analysis of its trace. The run and its trace stand whatever happens
    here; a failure is one line."""
    from tpumem.analysis.processes import SERIES_POINTS
    from tpumem.reading.analyses import analysed_with_events
    from tpumem.reading.summary_files import summarise_beside

    try:
        # (the summary's line: the points alone, not what a page explores)
        loaded, analysis, figures = analysed_with_events(
            trace, series_points=SERIES_POINTS, page=False
        )
    except TpumemError as error:
        print(f"tpumem: no report: {error}", file=sys.stderr)
        return
    unwritten = summarise_beside(trace, analysis)
    if unwritten is not None:
        print(f"tpumem: {unwritten}", file=sys.stderr)
    if reporter is not None:
        color = sys.stderr.isatty()
        sys.stderr.write(reporter.render(analysis, width=width, color=color, full=full))
        print(f"tpumem: trace written to {trace}", file=sys.stderr)
    if logdir is not None:
        from tpumem.export.tensorboard import export_loaded, exported_lines

        try:
            with logdir_written(logdir, force=False) as (local, named):
                exported = export_loaded([(trace, loaded, figures)], local)
            print(exported_lines(exported, logdir, named), file=sys.stderr)
        except TpumemError as error:
            print(f"tpumem: no TensorBoard export: {error}", file=sys.stderr)
