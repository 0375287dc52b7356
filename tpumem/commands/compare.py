"""`tpumem compare`: runs side by side. Each argument is a trace file, or a script
(with its arguments, quoted as one: "train.py --steps 30") that is profiled first,
each in its own process (the launcher's runner): two frameworks in one process
can abort it."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from tpumem.commands.options import parse_capacity, parse_topologies
from tpumem.commands.tpu_compiles import compile_for_tpus
from tpumem.errors import TpumemError
from tpumem.outputs import emit, free_name
from tpumem.progress import progress

FORMATS = ("text", "json")


def run_compare(
    runs: list[str],
    html: Path | None,
    fmt: str,
    output_dir: Path,
    width: int,
    force: bool,
    capacity: str | None = None,
    tpu: list[str] | None = None,
) -> None:
    if fmt not in FORMATS:
        raise TpumemError(f"unknown compare format {fmt!r} (choose from {', '.join(FORMATS)})")
    if len(runs) < 2:
        raise TpumemError("compare needs at least two runs")
    size = parse_capacity(capacity)
    from tpumem.analysis import analyze
    from tpumem.analysis.comparison import compare
    from tpumem.report import HTML_SERIES_POINTS
    from tpumem.trace.reader import load

    topologies = parse_topologies(tpu)
    sources = resolve(runs, output_dir)
    profile_scripts(sources)
    compile_for_tpus([s.trace for s in sources], topologies)
    points = HTML_SERIES_POINTS if html else 0  # only the page draws series
    analyses = []
    for source in sources:
        with progress(f"analysing {source.trace}"):
            analyses.append(analyze(load(source.trace), series_points=points, capacity=size))
    comparison = compare(analyses)
    if fmt == "json":
        from tpumem.report.compare_json import render_compare_json

        sys.stdout.write(render_compare_json(comparison))
    else:
        from tpumem.report.compare_text import render_compare_text

        sys.stdout.write(render_compare_text(comparison, width=width, color=sys.stdout.isatty()))
    if html is not None:
        from tpumem.report.html import render_compare_html

        emit(render_compare_html(comparison), html, [s.trace for s in sources], force)


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
    sources: list[RunSource] = []
    taken: set[Path] = set()
    for argument in arguments:
        words = _script_words(argument)
        if words is None:
            path = Path(argument)
            if path.is_dir():
                path = _busiest_trace(path)
            elif not path.is_file():
                raise TpumemError(f"{argument}: no such trace file, run directory or script")
            sources.append(RunSource(argument, path, None))
            continue
        if not Path(words[0]).is_file():
            raise TpumemError(f"{words[0]}: no such file")
        # A name no earlier trace has, on disk or among these runs.
        trace = free_name(output_dir / f"{Path(words[0]).stem}.tpumem", taken)
        sources.append(RunSource(argument, trace, words))
    return sources


def _busiest_trace(directory: Path) -> Path:
    """A distributed run stands for its busiest process: the one that runs out first."""
    from tpumem.analysis.processes import busiest
    from tpumem.reading.many_traces import summaries_of
    from tpumem.reading.paths import traces_of

    traces, _, _ = traces_of([directory])
    with progress(f"analysing {len(traces):,} traces of {directory}"):
        most = busiest(summaries_of(traces))
    from tpumem.report.visible import visible

    print(
        f"tpumem: {visible(directory)} ({len(traces):,} processes) stands for its busiest, "
        f"{visible(most.name)} ({visible(most.path)})",
        file=sys.stderr,
    )
    return Path(most.path)


def profile_scripts(sources: list[RunSource]) -> None:
    """Profile each script in turn. Their own output goes to stderr, so that
    stdout holds the comparison alone."""
    from tpumem.adapters import CaptureOptions
    from tpumem.launch.launcher import ProfileRequest, run_profiled

    scripts = [s for s in sources if s.command is not None]
    for number, source in enumerate(scripts, 1):
        assert source.command is not None
        print(
            f"tpumem: profiling {source.argument} ({number} of {len(scripts)}) -> {source.trace}",
            file=sys.stderr,
            flush=True,
        )
        source.trace.parent.mkdir(parents=True, exist_ok=True)
        request = ProfileRequest(
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
