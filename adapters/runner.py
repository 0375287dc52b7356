"""The profiled process: `python -m tpumem.adapters.runner`, started by `tpumem profile`.

It opens the trace, starts the framework's adapter, then runs the user's script as
`python script.py` would (sys.argv, sys.path[0], a fresh `__main__`, the working
directory untouched), records how it ended, and closes the trace. Its settings
come in one environment variable, removed before the script sees the environment.
"""

from __future__ import annotations

import json
import os
import platform
import runpy
import signal
import sys
import types
from dataclasses import asdict, dataclass, field
from typing import Any

CONFIG_VARIABLE = "TPUMEM_RUNNER_CONFIG"
ADAPTER_FAILED = 70  # EX_SOFTWARE: the runner, not the script, failed


@dataclass(frozen=True, slots=True)
class RunConfig:
    output: str  # the trace's name; with placeholders ({host}, {rank}, {pid}) when `named_here`
    framework: str
    target: str  # a script's path, or a module's name when `module` is true
    module: bool
    args: list[str]
    capture: dict[str, Any] = field(default_factory=dict)  # CaptureOptions' fields
    environment: dict[str, str] = field(default_factory=dict)  # what tpumem set
    output_fd: int | None = None  # the trace, created by `tpumem profile` and passed open
    parent_pid: int | None = None  # `tpumem profile`, which this process must not outlive
    status_fd: int | None = None  # where to tell `tpumem profile` how the run ended
    named_here: bool = False  # this process creates the trace, its name filled in here
    force: bool = False  # a trace named here replaces an existing file
    follow: bool = False  # --follow: every process that imports a framework records itself

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> RunConfig:
        return cls(**json.loads(text))


def _run_target(config: RunConfig) -> None:
    if config.module:
        sys.argv = [config.target, *config.args]  # runpy puts the module's file first
        sys.path[0] = os.getcwd()
        runpy.run_module(config.target, run_name="__main__", alter_sys=True)
        return
    path = os.path.abspath(config.target)
    sys.argv = [config.target, *config.args]
    sys.path[0] = os.path.dirname(os.path.realpath(path))
    with open(path, "rb") as handle:
        code = compile(handle.read(), path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = path  # absolute, as Python 3.9+ sets it for a script
    main.__builtins__ = __builtins__  # type: ignore[attr-defined]
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _user_traceback(error: BaseException) -> types.TracebackType | None:
    """The traceback from the user's code down, as `python script.py` prints it."""
    tb = error.__traceback__
    ours = (__file__, runpy.__file__)
    while tb is not None and tb.tb_frame.f_code.co_filename in ours:
        tb = tb.tb_next
    return tb


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_metadata(
    framework: str,
    source: str,
    command: list[str],
    capture: dict[str, Any],
    environment: dict[str, str],
) -> dict[str, Any]:
    """The trace's header for a run recorded in this process."""
    from tpumem import __version__
    from tpumem.adapters.process_identity import from_environment, run_id_from_environment
    from tpumem.trace.metadata import SETTINGS_VARIABLES

    return {
        "framework": framework,
        "source": source,
        "command": tuple(command),
        "cwd": os.getcwd(),
        "host": platform.node(),
        "pid": os.getpid(),
        "process": from_environment(os.environ),
        "run": run_id_from_environment(os.environ),
        "python": platform.python_version(),
        "tpumem_version": __version__,
        # (Where XLA dumped programs is a temporary directory, gone after the run.)
        "capture_options": {k: v for k, v in capture.items() if k != "xla_dump_dir"},
        "set_by_tpumem": environment,
        "env": {k: v for k, v in os.environ.items() if k in SETTINGS_VARIABLES},
        "warnings": (),
    }


def _metadata(config: RunConfig) -> dict[str, Any]:
    command = ["-m", config.target] if config.module else [config.target]
    return run_metadata(
        config.framework,
        "tpumem profile",
        [*command, *config.args],
        config.capture,
        config.environment,
    )


def _tell(config: RunConfig, news: dict[str, Any], last: bool = False) -> None:
    """For `tpumem profile`, one JSON line on the status pipe: where the trace is
    (as it is named), and at the end how the run ended."""
    if config.status_fd is None:
        return
    try:
        os.write(config.status_fd, json.dumps(news).encode() + b"\n")
        if last:
            os.close(config.status_fd)
    except OSError:
        pass  # tpumem is gone: nobody to tell


def read_ending(descriptor: int) -> dict[str, Any]:
    """What the runner said on the status pipe, its lines merged (later ones win):
    `output`, where the trace is; `exit` or `adapter_failed`, how it ended (neither:
    it was killed). Read without waiting: a process the script forked may hold
    the pipe open."""
    os.set_blocking(descriptor, False)
    data = b""
    try:
        while chunk := os.read(descriptor, 65536):
            data += chunk
    except BlockingIOError:
        pass
    finally:
        os.close(descriptor)
    said: dict[str, Any] = {}
    for line in data.splitlines():
        try:
            news = json.loads(line)
        except ValueError:
            continue
        if isinstance(news, dict):
            said.update(news)
    return said


def _die_with_parent(parent_pid: int | None) -> None:
    """SIGTERM when `tpumem profile` dies, however it dies (Linux's parent-death
    signal): a run nobody waits for must not go on holding the device. A script
    that handles SIGTERM (to save a checkpoint) gets to."""
    if parent_pid is None or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent_pid:  # it died before the signal was asked for
        os._exit(128 + signal.SIGTERM)


@dataclass
class _Recording:
    """The runner's own trace and adapter (without --follow)."""

    writer: Any
    adapter: Any
    name: Any  # a TraceName, where the trace's name has placeholders
    output: str

    def stop(self, exit_info: Any) -> None:
        from tpumem.adapters.base import end_recording

        end_recording(self.adapter, self.writer, exit_info)

    def say_failure(self) -> None:
        failed = self.writer.failed
        if failed is not None:
            where = self.name.path if self.name is not None else self.output
            print(
                f"tpumem: the trace stopped early: {failed.strerror or failed}; {where} "
                "keeps what was written before",
                file=sys.stderr,
            )


def _start_recording(config: RunConfig) -> _Recording:
    """The trace opened and the adapter started, before the script runs; on failure
    one line and the exit status ADAPTER_FAILED."""
    from tpumem.adapters import CaptureOptions, get_adapter
    from tpumem.adapters.call_stacks import end_walks_at
    from tpumem.adapters.trace_name import TraceName
    from tpumem.errors import TpumemError
    from tpumem.trace.writer import TraceWriter

    metadata = _metadata(config)
    name: TraceName | None = None
    target: str | int = config.output if config.output_fd is None else config.output_fd
    if config.named_here:
        try:
            name = TraceName(
                config.output,
                config.force,
                metadata["process"],
                lambda path: _tell(config, {"output": path}),
            )
        except TpumemError as failure:
            print(f"tpumem: error: {failure}", file=sys.stderr)
            _tell(config, {"adapter_failed": True}, last=True)
            sys.exit(ADAPTER_FAILED)
        target = name.descriptor
    writer = TraceWriter(target, metadata)
    end_walks_at(_run_target.__code__)  # the frames beyond it are this runner's
    adapter = get_adapter(config.framework)(CaptureOptions(**config.capture))
    if name is not None:
        adapter.identified = name.settle
    try:
        adapter.start(writer)
    except (ImportError, TpumemError) as failure:
        writer.patch_metadata(warnings=[f"the {config.framework} adapter failed: {failure}"])
        writer.close()
        print(f"tpumem: error: the {config.framework} adapter failed: {failure}", file=sys.stderr)
        _tell(config, {"adapter_failed": True}, last=True)
        sys.exit(ADAPTER_FAILED)
    return _Recording(writer, adapter, name, config.output)


def main() -> None:
    config = RunConfig.from_json(os.environ.pop(CONFIG_VARIABLE))
    _die_with_parent(config.parent_pid)
    from tpumem.adapters import follow
    from tpumem.trace.metadata import ExitStatus
    from tpumem.trace.records import encode

    runner_pid = os.getpid()
    for descriptor in (config.output_fd, config.status_fd):
        if descriptor is not None:  # the script's own programs get neither
            os.set_inheritable(descriptor, False)
    # With --follow, this process records itself as the script's other processes
    # do: if it imports a framework (follow.py).
    recording = None if config.follow else _start_recording(config)
    code, exit_info, error = 0, ExitStatus(code=0), None
    try:
        _run_target(config)
    except SystemExit as stop:
        code = _exit_code(stop.code)
        exit_info = ExitStatus(code=code)
    except BaseException as caught:
        error = caught
        code = 1
        exit_info = ExitStatus(code=1, exception=f"{type(caught).__name__}: {caught}")
        if isinstance(caught, KeyboardInterrupt):
            exit_info = ExitStatus(
                signal=int(signal.SIGINT), signal_name="SIGINT", exception="KeyboardInterrupt"
            )
    finally:
        if os.getpid() == runner_pid:
            if recording is not None:
                recording.stop(exit_info)
            else:
                follow.finish(exit_info)
    # (A process the script forked ends here too, as it would have without tpumem:
    # the trace and the adapter are the runner's, and it leaves them alone.)
    if os.getpid() == runner_pid:
        _tell(config, {"exit": encode(exit_info)}, last=True)
        if recording is not None:
            recording.say_failure()
    if error is not None:
        trimmed = _user_traceback(error)
        sys.excepthook(type(error), error.with_traceback(trimmed), trimmed)
        if isinstance(error, KeyboardInterrupt):
            # As Python does: die by the signal, so the parent sees how it ended.
            sys.stdout.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    sys.exit(code)


if __name__ == "__main__":
    main()
