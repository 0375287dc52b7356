"""`tpumem.track`: the capture `tpumem profile` makes, started and stopped inside
the user's own process (a notebook, a test, one part of a script).

    with tpumem.track("step.tpumem") as run:
        train(steps=10)
    print(run.report("text"))

The framework is the one the process uses (or `framework=`). One track
at a time. When the block ends the adapter puts back what it replaced, so the
framework goes on as before. What `tpumem profile` sets before the framework
starts (`Adapter.environment`), `prepare_frameworks` sets in this process for
the entry points that come first (`%load_ext tpumem`, the pytest plugin); where
the framework had already read it, the adapter's warnings in the report say
which setting, and the environment line that gives it.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tpumem.errors import TpumemError
from tpumem.report import HTML_SERIES_POINTS
from tpumem.trace.metadata import TRACKED

if TYPE_CHECKING:
    from tpumem.adapters.base import Adapter
    from tpumem.adapters.import_watch import ImportWatch
    from tpumem.analysis.comparison import Comparison
    from tpumem.analysis.trace_figures import TraceAnalysis
    from tpumem.trace.writer import TraceWriter

SOURCE = TRACKED
DEFAULT_OUTPUT = Path("track.tpumem")

F = TypeVar("F", bound=Callable[..., Any])
_lock = threading.Lock()
_running: Tracker | None = None
# In a process forked while its parent recorded, why no track can start here
# (the adapter could not let go of the parent's capture); None where one can.
_forked_from: str | None = None
_fork_hook = False  # registered in this process (a forked child inherits it)
_set_here: dict[str, dict[str, str]] = {}  # by prepare_frameworks, per framework


def prepare_frameworks() -> None:
    """Sets in this process's environment what `tpumem profile` sets in a
    profiled script's, for each installed framework that has not read it yet and
    where the user has not set it (TensorFlow's CPU allocator then reports to
    its profiler); and, where no framework has started, the XLA dump every later
    recording reads its programs from (adapters/xla_dump.py, open_session_dump).
    Each trace says what was set (`set_by_tpumem`)."""
    from tpumem.adapters import CaptureOptions, available_adapters, get_adapter
    from tpumem.adapters.xla_dump import open_session_dump

    names = available_adapters()
    started = any(get_adapter(n).runtime_started() for n in names if _imported(n))
    dump = {} if started else open_session_dump(os.environ)
    for name in names:
        adapter = get_adapter(name)
        if name in _set_here or adapter.environment_read():
            continue
        _set_here[name] = {**adapter.environment(CaptureOptions(), os.environ), **dump}
        os.environ.update(_set_here[name])


def _imported(name: str) -> bool:
    from tpumem.adapters import get_adapter

    return get_adapter(name).module in sys.modules


def loaded_framework() -> str | None:
    """The framework this process uses: the one it imported; of several, the one
    whose runtime it started, else the one not imported by another (TensorFlow
    imports JAX, and does not use it). None where it has imported none yet: the
    recording then starts when it does (adapters/import_watch.py)."""
    from tpumem.adapters import adapter_names, get_adapter

    names = adapter_names()
    found = sorted({names[module] for module in names if module in sys.modules})
    if not found:
        return None
    started = [name for name in found if get_adapter(name).runtime_started()]
    used = started or [
        name for name in found if not set(get_adapter(name).imported_by) & set(found)
    ]
    if len(used) != 1:
        raise TpumemError(
            f"tpumem.track found {' and '.join(used or found)} in this process: name the "
            f"one to record: tpumem.track(..., framework={(used or found)[0]!r})"
        )
    return used[0]


def _process_name() -> str:
    """What the report's Source row names: the script, or the kind of kernel."""
    program = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    if Path(program).name == "ipykernel_launcher.py":
        return "a Jupyter kernel"
    return program


class Tracker:
    """One recording: a context manager, or a decorator whose every call records."""

    def __init__(
        self,
        output: str | Path | None = None,
        *,
        framework: str | None = None,
        force: bool = False,
        programs: bool = True,
        summary: bool = True,
    ) -> None:
        self.output = Path(output) if output is not None else None
        self.framework = framework
        self.force = force
        self.programs = programs
        # The recording's summary beside its trace, made when it stops (an analysis
        # of the trace, in this process): a run of many hosts is read from them.
        self.summary = summary
        self.path: Path | None = None  # the trace, once started
        self._writer: TraceWriter | None = None
        self._adapter: Adapter | None = None
        self._watch: ImportWatch | None = None  # waiting for the framework's import
        self._stopped = False

    # -- recording -------------------------------------------------------------

    def __enter__(self) -> Tracker:
        self.start()
        return self

    def __exit__(self, kind: Any, error: BaseException | None, traceback: Any) -> None:
        self.stop(error)

    def __call__(self, function: F) -> F:
        @functools.wraps(function)
        def tracked(*args: Any, **kwargs: Any) -> Any:
            # Each call its own trace: the name given, then numbered.
            with Tracker(
                self._next_output(),
                framework=self.framework,
                force=self.force,
                programs=self.programs,
                summary=self.summary,
            ):
                return function(*args, **kwargs)

        return tracked  # type: ignore[return-value]

    def _next_output(self) -> Path:
        from tpumem.outputs import free_name

        wanted = self.output or DEFAULT_OUTPUT
        return wanted if self.force else free_name(wanted)

    def start(self) -> None:
        """Starts the recording; where the process has not imported the framework
        yet, it starts as the framework's import runs (in the block, the cell or
        the test), as `tpumem profile` starts it."""
        global _running, _fork_hook
        from tpumem.adapters.import_watch import FRAMEWORKS, ImportWatch
        from tpumem.outputs import check_target

        with _lock:
            if _forked_from is not None:
                raise TpumemError(_forked_from)
            if _running is not None:
                raise TpumemError(
                    f"tpumem.track is already recording (to {_running.path}): one at a time"
                )
            if self.output is not None and check_target(self.output) and not self.force:
                raise TpumemError(
                    f"{self.output}: exists; tpumem.track(..., force=True) replaces it"
                )
            framework = self.framework or loaded_framework()
            if framework is not None and (framework not in FRAMEWORKS or framework in sys.modules):
                self._begin(framework, importing=False)()
            else:
                if framework is not None:
                    from tpumem.adapters import get_adapter

                    get_adapter(framework)  # unknown, not installed: said now
                self._watch = ImportWatch(
                    self._begin, framework, failed=self._import_failed, yielded=self._yielded
                )
                self._watch.install()
            _running = self
            if not _fork_hook:
                _fork_hook = True
                os.register_at_fork(after_in_child=_forked)

    def _begin(self, framework: str, importing: bool = True) -> Callable[[], None]:
        """The trace opened and the adapter prepared; returns the adapter's start.
        `importing`: called as the framework's module is about to run (the watch)."""
        from tpumem.adapters import CaptureOptions, get_adapter
        from tpumem.adapters.base import set_before_start
        from tpumem.adapters.run_header import run_metadata
        from tpumem.outputs import create_trace, default_trace
        from tpumem.trace.writer import TraceWriter

        adapter_class = get_adapter(framework)
        options = CaptureOptions(programs=self.programs)
        command = [SOURCE, "in", _process_name()]
        capture = {"programs": options.programs}
        if importing:  # set now, before it starts, as profile does
            _set_here.setdefault(framework, {}).update(set_before_start(adapter_class, options))
        set_here = _set_here.get(framework, {})
        metadata = run_metadata(framework, SOURCE, command, capture, set_here)
        if self._writer is not None:  # (a recording that yielded: its trace again)
            writer = self._writer
            writer.begin_again(metadata)
        else:
            if self.output is None:
                self.path, descriptor = default_trace(DEFAULT_OUTPUT, ())
            else:  # (an existing file was refused in `start`; create_trace refuses a new one)
                self.path, descriptor = self.output, create_trace(self.output, (), self.force)
            writer = TraceWriter(descriptor, metadata)
        adapter = adapter_class(options)
        self._writer, self._adapter = writer, adapter

        def failed(failure: Exception) -> TpumemError:
            self._writer = self._adapter = None
            writer.patch_metadata(warnings=[f"the {framework} adapter failed: {failure}"])
            writer.close()
            return TpumemError(f"the {framework} adapter failed: {failure}")

        try:
            adapter.prepare(writer)
        except (ImportError, TpumemError) as failure:
            raise failed(failure) from None

        def start() -> None:
            try:
                adapter.start(writer)
            except (ImportError, TpumemError) as failure:
                raise failed(failure) from None

        return start

    def _yielded(self, framework: str) -> None:
        """The block imported the framework this one yields to (PyTorch/XLA after
        torch): this recording lets go, and starts again as the other's."""
        if self._adapter is not None:
            self._adapter.forget()

    def _import_failed(self, framework: str, error: BaseException) -> None:
        """The block's own import of its framework raised: it goes on as without
        tpumem; the trace says so and holds nothing more."""
        writer, self._writer, self._adapter = self._writer, None, None
        if writer is not None:
            writer.patch_metadata(
                warnings=[f"the import of {framework} failed: {error!r}; nothing recorded"]
            )
            writer.close()

    @property
    def recorded_nothing(self) -> bool:
        """Stopped without the block importing a framework: no trace was made."""
        return self._stopped and self.path is None

    def stop(self, error: BaseException | None = None) -> None:
        global _running
        from tpumem.adapters.base import end_recording
        from tpumem.trace.metadata import ExitStatus

        self._stopped = True
        if self._watch is not None:
            self._watch.remove()
            self._watch = None
        writer, adapter = self._writer, self._adapter
        if writer is None or adapter is None:
            with _lock:
                if _running is self:
                    _running = None
            return
        ending = ExitStatus(code=0)
        if error is not None:
            ending = ExitStatus(code=1, exception=f"{type(error).__name__}: {error}")
        try:
            end_recording(adapter, writer, ending)
        finally:
            self._writer = self._adapter = None
            with _lock:
                _running = None
        if self.summary and self.path is not None:
            from tpumem.reading.summary_files import summarise_beside

            unwritten = summarise_beside(self.path)
            if unwritten is not None:
                print(f"tpumem: {unwritten}", file=sys.stderr)

    # -- what it recorded ------------------------------------------------------

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, str]:
        """In a notebook, a recorded track shows its report (HTML, and text)."""
        if self.path is None or self._writer is not None:
            state = "recording" if self._writer is not None else "not started"
            if self.recorded_nothing:
                state = "recorded nothing: no framework was imported"
            return {"text/plain": f"<tpumem.track {self.output or DEFAULT_OUTPUT}: {state}>"}
        from tpumem.report.notebook_bundles import run_bundle

        return run_bundle(self.analysis())

    def _repr_html_(self) -> str | None:
        return self._repr_mimebundle_().get("text/html")

    def analysis(self, series_points: int = HTML_SERIES_POINTS) -> TraceAnalysis:
        """The recording's analysis; by default with the series the HTML report draws."""
        return analysis_of(self._recorded(), series_points)

    def _recorded(self) -> Path:
        if self.path is None:
            from tpumem.adapters.import_watch import FRAMEWORKS

            raise TpumemError(
                "tpumem.track has recorded nothing: the process imported none of the "
                f"frameworks ({', '.join(FRAMEWORKS)}) while it ran"
            )
        if self._writer is not None:
            raise TpumemError("tpumem.track is still recording: report after the block")
        return self.path

    def report(
        self, format: str | None = None, *, width: int = 100, full: bool = False
    ) -> TraceAnalysis | str:
        """The recording's analysis; with `format` ("text", "json", "md", "html"),
        the report in that format, as `tpumem report` writes it (`full`: the text
        report whole, not the answer alone)."""
        from tpumem.report import reporter_for

        if format is None:
            return self.analysis(series_points=0)
        chosen = reporter_for(None, format)
        return chosen.render(self.analysis(chosen.series_points), width=width, full=full)


def _forked() -> None:
    """In a child forked while this process recorded: the recording is the
    parent's (its writer writes nothing here), so it is let go, and the child may
    start its own; where the adapter cannot put back what it replaced, a track
    here says so rather than record over it."""
    global _running, _lock, _forked_from
    _lock = threading.Lock()  # another thread may have held it when the parent forked
    inherited, _running = _running, None
    if inherited is None:
        return
    adapter, inherited._writer, inherited._adapter = inherited._adapter, None, None
    if inherited._watch is not None:  # (its import would open the parent's trace here)
        inherited._watch.remove()
        inherited._watch = None
    if adapter is None:
        return
    try:
        adapter.forget()
    except Exception as error:
        _forked_from = (
            f"tpumem.track cannot record in this process: it was forked while its parent "
            f"recorded to {inherited.path}, and {error}"
        )


def analysis_of(path: str | Path, series_points: int = HTML_SERIES_POINTS) -> TraceAnalysis:
    """A trace's analysis (or a profile's), as a track, a notebook or
    `tpumem.compare` shows it."""
    from tpumem.reading.analyses import analysed_one

    return analysed_one(path, series_points=series_points)


def compare_runs(runs: tuple[str | Path | Tracker | TraceAnalysis, ...]) -> Comparison:
    """`tpumem.compare`: each run as a trace file, a track, or an analysis."""
    from tpumem.analysis.comparison import compare
    from tpumem.analysis.trace_figures import TraceAnalysis

    if len(runs) < 2:
        raise TpumemError("tpumem.compare needs two runs or more")
    analyses = []
    for run in runs:
        if isinstance(run, TraceAnalysis):
            analyses.append(run)
        elif isinstance(run, Tracker):
            analyses.append(run.analysis())
        else:
            analyses.append(analysis_of(run))
    return compare(analyses)


def track(
    output: str | Path | None = None,
    *,
    framework: str | None = None,
    force: bool = False,
    programs: bool = True,
    summary: bool = True,
) -> Tracker:
    """Records the framework's device memory while a block (or each call of a
    decorated function) runs, into `output` (default: track.tpumem, numbered
    when taken); `force` replaces an existing file; `programs=False` leaves out
    the compiled programs' HLO, as `tpumem profile --no-programs`; `summary=False`
    writes no summary beside the trace when the block ends."""
    return Tracker(output, framework=framework, force=force, programs=programs, summary=summary)
