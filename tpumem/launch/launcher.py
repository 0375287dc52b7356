"""`tpumem profile`: runs a script in a child process under its framework's adapter.

The child (tpumem.adapters.runner) writes the trace. This process only starts it, waits,
and, when the child died without closing the trace (a signal, the OOM killer,
os._exit), records from outside how the run ended. Ctrl-C reaches the child from
the terminal as it would without tpumem; this process waits for it to finish.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tpumem.adapters import CaptureOptions, available_adapters, get_adapter
from tpumem.adapters.quiet import QUIET_VARIABLE
from tpumem.adapters.runner import CONFIG_VARIABLE, RunConfig, read_ending
from tpumem.adapters.xla_dump import dump_directory
from tpumem.errors import TpumemError
from tpumem.launch.host_memory import memory_limit_bytes, oom_kills
from tpumem.launch.module_path import module_file
from tpumem.launch.stderr_filter import StderrFilter, filter_available
from tpumem.outputs import create_trace, default_trace, free_name, placeholders
from tpumem.trace.amend import append_metadata
from tpumem.trace.compact import compact
from tpumem.trace.metadata import AllocatorLog, ExitStatus

# Signals this process passes on to the script's process.
_FORWARDED = (signal.SIGTERM, signal.SIGHUP)
_DISK_FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


@dataclass(frozen=True, slots=True)
class ProfileRequest:
    target: str  # script path, or module name when `module`
    module: bool
    args: list[str]
    output: Path | None
    framework: str | None
    capture: CaptureOptions
    force: bool = False  # replace an existing trace at `output`
    stdout_to_stderr: bool = False  # the script's stdout (compare keeps its own for the table)
    follow: bool = False  # every process that imports a framework, a trace each in `output`/


@dataclass(frozen=True, slots=True)
class ProfileOutcome:
    trace: Path | None  # None: a trace named by the profiled process, which made none
    returncode: int  # as a shell reports it: 128 + signal for a signal
    adapter_failed: bool
    # Why nothing was recorded (the script imported no framework it could record),
    # as the profiled process said it: runner._Recording.unrecorded.
    unrecorded: dict | None = None


def _script_path(request: ProfileRequest) -> Path:
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


def default_output(request: ProfileRequest) -> Path:
    """<script or module>.tpumem in the working directory (numbered when taken)."""
    stem = request.target.rsplit(".", 1)[-1] if request.module else Path(request.target).stem
    return Path(f"{stem}.tpumem")


def _prepare(request: ProfileRequest) -> tuple[str, Path, int | None, dict[str, str]]:
    """(framework, trace path, the trace's open descriptor, environment to set). The
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
        output = request.output
        descriptor = create_trace(output, [script], request.force)
    return framework, output, descriptor, {}


def _record_ending(
    trace: Path, returncode: int, start_ns: int, chunk_s: float, memory: ExitStatus
) -> None:
    """For a child that died without closing its trace. `memory`: what was seen of
    its memory (the ExitStatus fields for a kill)."""
    if returncode < 0:
        number = -returncode
        name = signal.Signals(number).name if number in signal.valid_signals() else str(number)
        exit_info = replace(memory, signal=number, signal_name=name)
        how = f"was killed by {name}"
    else:
        exit_info = ExitStatus(code=returncode)
        how = f"ended with status {returncode} without closing the trace (os._exit?)"
    warning = (
        f"the profiled process {how}; the trace holds what was written before, and "
        f"the allocator events of its last {chunk_s:g} s (one capture chunk) may be missing"
    )
    try:
        append_metadata(
            trace,
            time.time_ns() - start_ns,
            exit=exit_info,
            recorded_by="tpumem profile",
            warnings=[warning],
        )
    except OSError as error:  # the trace stays as the run left it
        if error.errno not in _DISK_FULL:  # (of which the runner has already said)
            print(
                f"tpumem: could not record in {trace} how the run ended: {error.strerror or error}",
                file=sys.stderr,
            )


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


def run_profiled(request: ProfileRequest) -> ProfileOutcome:
    if request.follow:
        framework, output, descriptor = "", _run_directory(request), None
    else:
        framework, output, descriptor, environment = _prepare(request)
    # XLA's program dumps go to a directory this process removes after the run,
    # however the run ends.
    dump_dir = dump_directory() if request.capture.programs else None
    try:
        if request.follow:
            environment = _follow_environment(request, output, dump_dir)
        return _run(request, framework, output, descriptor, environment, dump_dir)
    finally:
        if dump_dir is not None:
            shutil.rmtree(dump_dir, ignore_errors=True)


def _run_directory(request: ProfileRequest) -> Path:
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
    request: ProfileRequest, directory: Path, dump_dir: str | None
) -> dict[str, str]:
    """What every process of the run starts with: the boot hook first on PYTHONPATH,
    the settings, the run's id, and what each framework's adapter sets before it loads."""
    from tpumem.adapters.follow import BOOT_DIRECTORY, FOLLOW_VARIABLE, OWN_VARIABLES, FollowConfig
    from tpumem.adapters.process_identity import RUN_ID_VARIABLE

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
    )
    path = os.environ.get("PYTHONPATH")
    environment[FOLLOW_VARIABLE] = config.to_json()
    environment["PYTHONPATH"] = BOOT_DIRECTORY + (os.pathsep + path if path else "")
    environment[RUN_ID_VARIABLE] = os.environ.get(RUN_ID_VARIABLE) or uuid.uuid4().hex
    return environment


def _run(
    request: ProfileRequest,
    framework: str,
    output: Path,
    descriptor: int | None,
    environment: dict[str, str],
    dump_dir: str | None,
) -> ProfileOutcome:
    # The runner says how the run ended on this pipe, once, as it exits; a runner
    # that was killed says nothing, and this process records the ending itself.
    status_read, status_write = os.pipe()
    config = RunConfig(
        output=str(output),
        framework=framework,
        target=request.target,
        module=request.module,
        args=list(request.args),
        capture=asdict(replace(request.capture, xla_dump_dir=dump_dir)),
        environment=environment,
        output_fd=descriptor,
        parent_pid=os.getpid(),
        status_fd=status_write,
        named_here=descriptor is None and not request.follow,
        force=request.force,
        follow=request.follow,
    )
    env = {**os.environ, **environment, CONFIG_VARIABLE: config.to_json()}
    stderr = StderrFilter() if filter_available() else None
    if stderr is not None:
        env[QUIET_VARIABLE] = "1"
    start_ns = time.time_ns()
    try:
        # The trace goes to the child open: another run given the same name (with
        # --force) cannot swap the file between its creation and its first write.
        child = subprocess.Popen(
            [sys.executable, "-m", "tpumem.adapters.runner"],
            env=env,
            stdout=sys.stderr.fileno() if request.stdout_to_stderr else None,
            stderr=stderr.child_fd if stderr is not None else None,
            pass_fds=tuple(fd for fd in (descriptor, status_write) if fd is not None),
        )
    finally:
        if descriptor is not None:
            os.close(descriptor)
        os.close(status_write)
        if stderr is not None:
            stderr.start()
    # The terminal sends Ctrl-C to the child too; this process waits for the child
    # to act on it (the script may catch it) rather than leaving it orphaned. (Set
    # after the start: an ignored SIGINT would be inherited by the child.) SIGTERM
    # and SIGHUP sent to this process are passed on, and it waits for the child to
    # end by them; should this process die anyway, the child gets SIGTERM (runner).
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    forwarded = {
        number: signal.signal(number, lambda number, _: child.send_signal(number))
        for number in _FORWARDED
    }
    kills_before = oom_kills()
    try:
        # wait4, not wait(): the child's own peak memory comes with its status.
        _, status, usage = os.wait4(child.pid, 0)
        returncode = child.returncode = os.waitstatus_to_exitcode(status)
    finally:
        signal.signal(signal.SIGINT, previous)
        for number, handler in forwarded.items():
            signal.signal(number, handler)
        if stderr is not None:
            stderr.finish()
    killed = -returncode if returncode < 0 else None
    ending = read_ending(status_read)
    status = 128 + killed if killed is not None else returncode  # as a shell says it
    adapter_failed = bool(ending.get("adapter_failed"))
    if request.follow:  # each process has closed its trace, or was killed writing it
        for trace in sorted(output.glob("*.tpumem")):
            with contextlib.suppress(OSError):
                compact(trace)
        return ProfileOutcome(output, status, adapter_failed)
    if "unrecorded" in ending and "exit" in ending:
        if descriptor is not None:
            with contextlib.suppress(OSError):
                if output.stat().st_size == 0:  # made by this process, never written
                    output.unlink()
        return ProfileOutcome(None, status, adapter_failed, ending["unrecorded"])
    if descriptor is None:  # named by the profiled process: where it said
        if "output" not in ending:
            return ProfileOutcome(None, status, adapter_failed)
        output = Path(ending["output"])
    recorded = ending.get("exit", {}).get("signal") if "exit" in ending else None
    if ("exit" not in ending and not adapter_failed) or (killed is not None and recorded != killed):
        kills_after = oom_kills()
        memory = ExitStatus(
            max_rss_bytes=usage.ru_maxrss * 1024,  # KiB on Linux
            memory_limit_bytes=memory_limit_bytes(),
            oom_kills=None if None in (kills_before, kills_after) else kills_after - kills_before,
        )
        _record_ending(output, returncode, start_ns, request.capture.chunk_s, memory)
    if stderr is not None:
        _record_oom_logs(output, stderr.oom_logs.finish(), start_ns)
    with contextlib.suppress(OSError):  # (unreadable) the trace stays as the run wrote it
        compact(output)
    return ProfileOutcome(trace=output, returncode=status, adapter_failed=adapter_failed)
