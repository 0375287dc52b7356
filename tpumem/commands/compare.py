"""`tpumem compare`: runs side by side. Each argument is a trace file, or a script
(with its arguments, quoted as one: "train.py --steps 30") that is profiled first,
each in its own process (the launcher's runner): two frameworks in one process
can abort it."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from tpumem.commands.options import text_width
from tpumem.commands.requests import CompareRequest
from tpumem.commands.tpu_compiles import compile_for_tpus
from tpumem.errors import TpumemError
from tpumem.outputs import STDOUT, emit, free_name
from tpumem.progress import progress
from tpumem.reading.paths import RunInput, is_profile, opened_runs, traces_of
from tpumem.units import counted


def run_compare(request: CompareRequest) -> None:
    from tpumem.analysis.comparison import compare
    from tpumem.reading.analyses import analysed
    from tpumem.report import COMPARISON, reporter, reporter_for

    chosen = reporter_for(None, request.fmt, COMPARISON, terminal=True)
    if len(request.runs) < 2:
        raise TpumemError("compare needs at least two runs")
    if request.html == STDOUT:
        raise TpumemError("--html -: the comparison is on standard output; give the page a file")
    sources = resolve(list(request.runs), request.output_dir)
    profile_scripts(sources)
    points = reporter(COMPARISON, "html").series_points if request.html else 0
    with opened_runs([s.trace for s in sources]) as given:
        traces = [_one_trace(run) for run in given]
        compile_for_tpus([trace for trace, _ in traces], request.tpu)
        analyses = []
        for trace, shown_as in traces:
            with progress(f"analysing {shown_as or trace}"):
                analyses.append(
                    analysed(trace, shown_as, series_points=points, capacity=request.capacity)
                )
    comparison = compare(analyses)
    sys.stdout.write(
        chosen.render(
            comparison, width=text_width(request.width, sys.stdout), color=sys.stdout.isatty()
        )
    )
    if request.html is not None:
        page = reporter(COMPARISON, "html").render(comparison)
        emit(page, request.html, [s.trace for s in sources], request.force)


@dataclass(frozen=True, slots=True)
class RunSource:
    argument: str
    trace: Path
    command: list[str] | None  # the script and its arguments, when profiled here


def _script_words(argument: str) -> list[str] | None:
    try:
        words = shlex.split(argument)
    except ValueError:
        return None
    return words if words and words[0].endswith(".py") else None


def resolve(arguments: list[str], output_dir: Path) -> list[RunSource]:
    from tpumem.outputs import remote_url

    sources: list[RunSource] = []
    taken: set[Path] = set()
    for argument in arguments:
        words = _script_words(argument)
        if words is None:
            path = Path(argument)
            if remote_url(path) is not None:  # (object storage: read where it is kept)
                sources.append(RunSource(argument, path, None))
                continue
            if not path.exists():
                raise TpumemError(f"{argument}: no such trace file, run directory or script")
            if path.is_dir() and not is_profile(path):
                traces_of([path])  # (a directory without traces: said before any script runs)
            sources.append(RunSource(argument, path, None))
            continue
        if not Path(words[0]).is_file():
            raise TpumemError(f"{words[0]}: no such file")
        # A name no earlier trace has, on disk or among these runs.
        trace = free_name(output_dir / f"{Path(words[0]).stem}.tpumem", taken)
        sources.append(RunSource(argument, trace, words))
    return sources


def _one_trace(given: RunInput) -> tuple[Path, str | None]:
    """The trace that stands for a run, and the name it goes by: a distributed
    run's busiest process (the one that runs out first)."""
    if not given.is_processes:
        return given.traces[0], given.shown_as
    from tpumem.analysis.processes import busiest
    from tpumem.reading.many_traces import summaries_of
    from tpumem.report.escapes import visible

    with progress(f"analysing {counted(len(given.traces), 'trace')} of {given.where}"):
        most = busiest(summaries_of(given.traces, given.stored))
        if given.stored is not None:  # (in object storage: the busiest, read in full, brought)
            given.stored.fetch(Path(most.path))
    print(
        f"tpumem: {visible(given.where)} ({counted(len(given.traces), 'process', 'processes')}) "
        "stands for its "
        f"busiest, {visible(most.name)} ({visible(given.name_of(Path(most.path)) or most.path)})",
        file=sys.stderr,
    )
    return Path(most.path), given.name_of(Path(most.path))


def profile_scripts(sources: list[RunSource]) -> None:
    """Profile each script in turn. Their own output goes to stderr, so that
    stdout holds the comparison alone."""
    from tpumem.adapters import CaptureOptions
    from tpumem.launch.launcher import LaunchRequest, run_profiled

    scripts = [s for s in sources if s.command is not None]
    for number, source in enumerate(scripts, 1):
        assert source.command is not None
        print(
            f"tpumem: profiling {source.argument} ({number} of {len(scripts)}) -> {source.trace}",
            file=sys.stderr,
            flush=True,
        )
        source.trace.parent.mkdir(parents=True, exist_ok=True)
        request = LaunchRequest(
            target=source.command[0],
            module=False,
            args=source.command[1:],
            output=source.trace,
            framework=None,
            capture=CaptureOptions(),
            stdout_to_stderr=True,
        )
        outcome = run_profiled(request)
        if outcome.unrecorded is not None:
            from tpumem.commands.unrecorded import unrecorded_line

            raise TpumemError(f"{source.argument}: {unrecorded_line(source.command[0], outcome)}")
        if outcome.returncode != 0:
            raise TpumemError(
                f"{source.argument}: ended with exit status {outcome.returncode}; what it "
                f"recorded is in {source.trace} (tpumem report {source.trace})",
                exit_code=1,
            )
