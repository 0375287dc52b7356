"""`tpumem profile`: runs a script in a child process under its framework's adapter.

The child (tpumem.adapters.runner) writes the trace. This process only starts it, waits,
and, when the child died without closing the trace (a signal, the OOM killer,
os._exit), records from outside how the run ended (endings.py). Ctrl-C reaches the
child from the terminal as it would without tpumem; a signal sent to this process
is passed on to it (signals.py). With --follow, no process of the script's tree
outlives the run (tree.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tpumem.adapters import CaptureOptions, available_adapters, get_adapter
from tpumem.adapters.launch_protocol import (
    BOOT_DIRECTORY,
    CONFIG_VARIABLE,
    FOLLOW_VARIABLE,
    OWN_VARIABLES,
    QUIET_VARIABLE,
    RUN_ID_VARIABLE,
    FollowConfig,
    LaunchConfig,
    read_ending,
)
from tpumem.adapters.xla_dump import dump_directory
from tpumem.errors import TpumemError
from tpumem.launch.endings import (
    closed,
    end_followed,
    exit_status,
    record_ending,
    write_unopened,
)
from tpumem.launch.host_memory import memory_limit_bytes, oom_kills
from tpumem.launch.module_path import module_file
from tpumem.launch.own_trace import OwnTrace
from tpumem.launch.signals import HeldSignals, held
from tpumem.launch.status_line import LiveView, StatusLine
from tpumem.launch.stderr_filter import StderrFilter, filter_available
from tpumem.launch.tree import TreeEnd, become_subreaper, end_tree, said
from tpumem.outputs import create_trace, default_trace, free_name, literal_name, placeholders
from tpumem.trace.amend import append_metadata
from tpumem.trace.compact import compact
from tpumem.trace.live import writing_process_at
from tpumem.trace.metadata import AllocatorLog, ExitStatus

if TYPE_CHECKING:
    import resource


@dataclass(frozen=True, slots=True)
class LaunchRequest:
    target: str  # script path, or module name when `module`
    module: bool
    args: list[str]
    output: Path | None
    framework: str | None
    capture: CaptureOptions
    force: bool = False  # replace an existing trace at `output`
    stdout_to_stderr: bool = False  # the script's stdout (compare keeps its own for the table)
    follow: bool = False  # every process that imports a framework, a trace each in `output`/
    live: LiveView | None = None  # a live line on the terminal while it runs (status_line.py)


@dataclass(frozen=True, slots=True)
class ProfileOutcome:
    trace: Path | None  # None: a trace named by the profiled process, which made none
    returncode: int  # as a shell reports it: 128 + signal for a signal
    adapter_failed: bool
    # Why nothing was recorded (the script imported no framework it could record),
    # as the profiled process said it: runner._Recording.unrecorded; with `how`
    # where a signal ended it first.
    unrecorded: dict | None = None
    lost: bool = False  # its trace lost its name and could not be saved (said already)


def _script_path(request: LaunchRequest) -> Path:
    if request.module:
        found = module_file(request.target)
        if found is None:
            raise TpumemError(f"no module named {request.target!r}")
        return found
    path = Path(request.target)
    if not path.exists():
        raise TpumemError(f"{path}: no such file")
    if path.is_dir():
        raise TpumemError(f"{path}: is a directory, not a Python script")
    if not path.is_file():
        raise TpumemError(f"{path}: not a regular file, so not a Python script")
    return path


def default_output(request: LaunchRequest) -> Path:
    """<script or module>.tpumem in the working directory (numbered when taken)."""
    stem = request.target.rsplit(".", 1)[-1] if request.module else Path(request.target).stem
    return Path(f"{stem}.tpumem")


def _prepare(request: LaunchRequest) -> tuple[str, Path, int | None]:
    """(framework, trace path, the trace's open descriptor). The
    framework is the one named, else empty: the profiled process records the one
    the script imports, as it imports it (adapters/import_watch.py), and sets what
    that framework's adapter needs then. A name with placeholders is the profiled
    process's to fill in and create: no descriptor then."""
    script = _script_path(request)
    framework = request.framework or ""
    if framework:
        get_adapter(framework)  # unknown or not installed: said before the run
    if request.output is None:
        output, descriptor = default_trace(default_output(request), [script])
    elif placeholders(str(request.output)):
        output, descriptor = request.output, None
    else:
        output = literal_name(request.output)
        writer = writing_process_at(output) if request.force else None
        if writer is not None:
            raise TpumemError(
                f"{output}: still being written (by process {writer}); not replaced, even "
                "with --force: -o another name"
            )
        descriptor = create_trace(output, [script], request.force)
    return framework, output, descriptor


def run_profiled(request: LaunchRequest) -> ProfileOutcome:
    # From before the trace exists until how the run ended is in it, the signals
    # that stop a run are this process's to take and pass on (signals.py).
    with held() as signals:
        if request.follow:
            framework, output, descriptor = "", _run_directory(request), None
        else:
            framework, output, descriptor = _prepare(request)
        # XLA's program dumps go to a directory this process removes after the run,
        # however the run ends.
        dump_dir = dump_directory() if request.capture.programs else None
        try:
            environment = _follow_environment(request, output, dump_dir) if request.follow else {}
            launch = _Launch(request, framework, output, descriptor, environment, dump_dir)
            return _run(launch, signals)
        finally:
            if dump_dir is not None:
                shutil.rmtree(dump_dir, ignore_errors=True)


def _run_directory(request: LaunchRequest) -> Path:
    """--follow's run directory: -o, else <script>-run here (numbered when taken).
    One that holds traces already is written into only with --force."""
    _script_path(request)
    if request.output is None:
        stem = default_output(request).stem
        directory = free_name(Path(f"{stem}-run"))
    else:
        directory = request.output
        if directory.exists() and not directory.is_dir():
            raise TpumemError(f"{directory}: not a directory; --follow writes a run directory")
        if not request.force and any(directory.glob("*.tpumem")):
            raise TpumemError(
                f"{directory}: holds traces already; use --force to write over them, "
                "or -o another directory"
            )
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise TpumemError(f"{directory}: cannot make it: {error.strerror or error}") from None
    return directory


def _follow_environment(
    request: LaunchRequest, directory: Path, dump_dir: str | None
) -> dict[str, str]:
    """What every process of the run starts with: the boot hook first on PYTHONPATH,
    the settings, the run's id, and what each framework's adapter sets before it loads."""

    environment: dict[str, str] = {}
    for name in available_adapters():
        environment.update(get_adapter(name).environment(request.capture, os.environ))
    folder = str(directory).replace("{", "{{").replace("}", "}}")
    config = FollowConfig(
        pattern=os.path.join(folder, "{host}-{rank}.tpumem"),
        capture=asdict(replace(request.capture, xla_dump_dir=None)),
        force=request.force,
        environment={name: os.environ.get(name) for name in OWN_VARIABLES},
        dump_root=dump_dir,
        tpumem_pid=os.getpid(),
    )
    path = os.environ.get("PYTHONPATH")
    environment[FOLLOW_VARIABLE] = config.to_json()
    environment["PYTHONPATH"] = BOOT_DIRECTORY + (os.pathsep + path if path else "")
    environment[RUN_ID_VARIABLE] = os.environ.get(RUN_ID_VARIABLE) or uuid.uuid4().hex
    return environment


@dataclass
class _Started:
    """The profiled process, as this process started and waits for it."""

    child: subprocess.Popen
    status_read: int  # the runner's status pipe
    start_ns: int
    stderr: StderrFilter | None
    kills_before: int | None  # the control group's OOM kills when it started
    named_here: bool  # the trace's name has placeholders, filled in by the child
    stop_live: Callable[[], None] | None = None

    def finish(self) -> None:
        """After the child ended: its output passed on, the live line gone."""
        if self.stderr is not None:
            self.stderr.finish()
        if self.stop_live is not None:
            self.stop_live()


@dataclass(frozen=True, slots=True)
class _Launch:
    """A run as it is started: what was asked, and what was prepared for it."""

    request: LaunchRequest
    framework: str  # the one --framework named, else empty (the script's import says)
    output: Path  # the trace; with --follow, the run's directory
    descriptor: int | None  # the trace, created here and passed open; None: the child's
    environment: dict[str, str]  # what tpumem sets for the run
    dump_dir: str | None  # where XLA dumps the programs, removed after the run


def _run(launch: _Launch, signals: HeldSignals) -> ProfileOutcome:
    request, output, descriptor = launch.request, launch.output, launch.descriptor
    # Held open to the end: what this run reports is what its process wrote, even
    # if another file takes the trace's name meanwhile.
    own = OwnTrace.hold(output, descriptor) if descriptor is not None else None
    try:
        follow_tree = request.follow and become_subreaper()
        try:
            started = _start(launch, signals, own)
            reaped: dict[int, int] = {}
            try:
                # wait4, not wait(): the child's own peak memory comes with its status.
                status, usage = signals.wait(started.child.pid, reaped if follow_tree else None)
                tree = end_tree(signals, reaped) if follow_tree else None
            finally:
                started.finish()
        finally:
            if follow_tree:
                become_subreaper(False)
        returncode = started.child.returncode = os.waitstatus_to_exitcode(status)
        ending = read_ending(started.status_read)
        if request.follow:
            reaped[started.child.pid] = status
            run = launch.environment[RUN_ID_VARIABLE]
            return _after_followed(output, run, returncode, ending, reaped, tree)
        return _after_one(request, output, own, started, returncode, usage, ending)
    finally:
        if own is not None:
            own.close()


def _start(launch: _Launch, signals: HeldSignals, own: OwnTrace | None = None) -> _Started:
    request, descriptor, environment = launch.request, launch.descriptor, launch.environment
    # The runner says how the run ended on this pipe, once, as it exits; a runner
    # that was killed says nothing, and this process records the ending itself.
    status_read, status_write = os.pipe()
    config = LaunchConfig(
        output=str(launch.output),
        framework=launch.framework,
        target=request.target,
        module=request.module,
        args=list(request.args),
        capture=asdict(replace(request.capture, xla_dump_dir=launch.dump_dir)),
        environment=environment,
        output_fd=descriptor,
        parent_pid=os.getpid(),
        status_fd=status_write,
        named_here=descriptor is None and not request.follow,
        force=request.force,
        follow=request.follow,
        unblock_signals=signals.unblock,
    )
    env = {**os.environ, **environment, CONFIG_VARIABLE: config.to_json()}
    # The live line needs the trace's name (given) and what the script writes to
    # the terminal to pass through here, to go above it.
    live = request.live is not None and descriptor is not None and filter_available()
    status = StatusLine() if live and os.isatty(2) else None
    stderr = StderrFilter(status=status) if filter_available() else None
    if stderr is not None:
        env[QUIET_VARIABLE] = "1"
    stdout = sys.stderr.fileno() if request.stdout_to_stderr else None
    if status is not None and stderr is not None and (stdout is not None or _same_terminal(1, 2)):
        # Its stdout on that terminal shares its stderr's pseudo-terminal: one
        # stream, as on the terminal itself, so the two keep their order.
        stdout = stderr.child_fd
    start_ns = time.time_ns()
    try:
        # The trace goes to the child open: another run given the same name (with
        # --force) cannot swap the file between its creation and its first write.
        signals.child_starts()
        child = subprocess.Popen(
            [sys.executable, "-m", "tpumem.adapters.runner"],
            env=env,
            stdout=stdout,
            stderr=stderr.child_fd if stderr is not None else None,
            pass_fds=tuple(fd for fd in (descriptor, status_write) if fd is not None),
        )
    finally:
        if descriptor is not None:
            os.close(descriptor)
        os.close(status_write)
        if stderr is not None:
            stderr.start()
    stop_live = None
    if status is not None and request.live is not None:
        # The file this run created, not whatever comes to bear its name.
        followed = launch.output
        if own is not None and os.path.isdir("/proc/self/fd"):
            followed = Path(f"/proc/self/fd/{own.descriptor}")
        try:
            stop_live = request.live(followed, status)
        except Exception:  # (the line is a nicety; the run it watches is not)
            status.close()
    return _Started(child, status_read, start_ns, stderr, oom_kills(), config.named_here, stop_live)


def _same_terminal(first: int, second: int) -> bool:
    """Whether two descriptors are one terminal (a script's stdout and stderr on it)."""
    try:
        return os.isatty(first) and os.path.samestat(os.fstat(first), os.fstat(second))
    except OSError:
        return False


def _after_followed(
    directory: Path,
    run: str,
    returncode: int,
    ending: dict,
    reaped: dict[int, int],
    tree: TreeEnd | None,
) -> ProfileOutcome:
    """Each process has closed its trace, was killed writing it (its ending
    recorded here where this process saw it end), or never wrote one."""
    if tree is not None:
        line = said(tree)
        if line is not None:
            print(f"tpumem: {line}", file=sys.stderr)
    end_followed(directory, run, reaped, tree)
    for trace in sorted(directory.glob("*.tpumem")):
        with contextlib.suppress(OSError):
            compact(trace)
    status = 128 + -returncode if returncode < 0 else returncode  # as a shell says it
    return ProfileOutcome(directory, status, bool(ending.get("adapter_failed")))


def _after_one(
    request: LaunchRequest,
    output: Path,
    own: OwnTrace | None,
    started: _Started,
    returncode: int,
    usage: resource.struct_rusage,
    ending: dict,
) -> ProfileOutcome:
    killed = -returncode if returncode < 0 else None
    status = 128 + killed if killed is not None else returncode  # as a shell says it
    adapter_failed = bool(ending.get("adapter_failed"))
    named_here = started.named_here
    if "unrecorded" in ending and "exit" in ending:
        if not named_here:
            _remove_if_empty(output, own)
        return ProfileOutcome(None, status, adapter_failed, _unrecorded(ending, returncode))
    if named_here:  # named by the profiled process: where it said
        if "output" not in ending:
            never = "framework" not in ending and not adapter_failed
            unrecorded = _unrecorded(ending, returncode) if never else None
            return ProfileOutcome(None, status, adapter_failed, unrecorded)
        output = Path(ending["output"])
    recorded = ending.get("exit", {}).get("signal") if "exit" in ending else None
    unended = ("exit" not in ending and not adapter_failed) or (
        killed is not None and recorded != killed
    )
    memory = ExitStatus()
    if killed is not None:
        kills_after = oom_kills()
        before = started.kills_before
        memory = ExitStatus(
            max_rss_bytes=usage.ru_maxrss * 1024,  # KiB on Linux
            memory_limit_bytes=memory_limit_bytes(),
            oom_kills=None if before is None or kills_after is None else kills_after - before,
        )
    exit_info, how = exit_status(returncode, memory)
    if not adapter_failed and _size(output, own) == 0:  # it never wrote the header
        if "framework" not in ending:  # it ended before the script imported one
            _remove_if_empty(output, own)
            return ProfileOutcome(None, status, adapter_failed, _unrecorded(ending, returncode))
        told = _told_exit(ending)
        _write_header(request, output, own, started, ending["framework"], told or exit_info, how)
        unended = False
    if own is not None and not own.at_its_name():
        try:
            output = own.saved_elsewhere()
        except TpumemError as error:
            print(
                f"tpumem: {_replaced(own.path)}, and this run's could not be saved: {error}",
                file=sys.stderr,
            )
            return ProfileOutcome(None, status, adapter_failed, lost=True)
        print(f"tpumem: {_replaced(own.path)}; this run's is saved as {output}", file=sys.stderr)
    if not unended and not adapter_failed and not closed(output):
        # It said how it ended, but its trace was left open (it ended before its
        # recording could close it): the ending is written here, as it said it.
        unended, exit_info = True, _told_exit(ending) or exit_info
    if unended:
        if killed is None:
            how = f"{how} without closing the trace (os._exit?)"
        warning = (
            f"the profiled process {how}; the trace holds what was written before, and the "
            f"allocator events of its last {request.capture.chunk_s:g} s (one capture chunk) "
            "may be missing"
        )
        record_ending(output, time.time_ns() - started.start_ns, exit_info, warning)
    if started.stderr is not None:
        _record_oom_logs(output, started.stderr.oom_logs.finish(), started.start_ns)
    with contextlib.suppress(OSError):  # (unreadable) the trace stays as the run wrote it
        compact(output)
    return ProfileOutcome(trace=output, returncode=status, adapter_failed=adapter_failed)


def _replaced(path: Path) -> str:
    return (
        f"{path}: another file took the name of this run's trace while it ran (a run "
        "given the same -o with --force?)"
    )


def _told_exit(ending: dict) -> ExitStatus | None:
    """How the run ended, as the runner said it (KeyboardInterrupt's words too)."""
    told = ending.get("exit")
    if not isinstance(told, dict):
        return None
    try:
        return ExitStatus(**told)
    except TypeError:
        return None


def _unrecorded(ending: dict, returncode: int) -> dict:
    """Why nothing was recorded, as the runner said it; `how` names the signal
    that ended a run before the script imported a framework."""
    said = dict(ending.get("unrecorded") or {"imported": [], "wanted": None})
    if returncode < 0:
        said["how"] = exit_status(returncode)[1]
    return said


def _size(output: Path, own: OwnTrace | None) -> int | None:
    try:
        return own.size() if own is not None else output.stat().st_size
    except OSError:
        return None


def _remove_if_empty(output: Path, own: OwnTrace | None) -> None:
    """The trace this process made, never written: not left as an empty file (one
    that took its name since is not this run's to remove)."""
    if own is not None and not own.at_its_name():
        return
    with contextlib.suppress(OSError):
        if output.stat().st_size == 0:
            output.unlink()


def _write_header(
    request: LaunchRequest,
    output: Path,
    own: OwnTrace | None,
    started: _Started,
    framework: str,
    exit_info: ExitStatus,
    how: str,
) -> None:
    """The header of a trace the profiled process never wrote: it was killed as
    the script's import of its framework began, before the trace's writer had
    loaded."""
    from tpumem.adapters.run_header import run_metadata

    command = ["-m", request.target] if request.module else [request.target]
    metadata = run_metadata(
        framework, "tpumem profile", [*command, *request.args], asdict(request.capture), {}
    )
    metadata.update(pid=started.child.pid, start_time_ns=started.start_ns)
    warning = (
        f"the profiled process {how} as {framework}'s import began, before the trace's "
        "header was written: nothing was recorded (tpumem profile wrote the header and "
        "how the run ended)"
    )
    try:
        descriptor = os.dup(own.descriptor) if own is not None else os.open(output, os.O_WRONLY)
    except OSError:
        return
    write_unopened(descriptor, metadata, exit_info, warning)


def _record_oom_logs(trace: Path, logs: list[AllocatorLog], start_ns: int) -> None:
    """The allocator's own account of each failed allocation (stderr), in the trace."""
    if not logs:
        return
    with contextlib.suppress(OSError):  # the run's own ending is recorded already
        append_metadata(
            trace,
            time.time_ns() - start_ns,
            allocator_oom_logs=logs,
        )
