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
    output: str
    framework: str
    target: str  # a script's path, or a module's name when `module` is true
    module: bool
    args: list[str]
    capture: dict[str, Any] = field(default_factory=dict)  # CaptureOptions' fields
    environment: dict[str, str] = field(default_factory=dict)  # what tpumem set
    output_fd: int | None = None  # the trace, created by `tpumem profile` and passed open
    parent_pid: int | None = None  # `tpumem profile`, which this process must not outlive
    status_fd: int | None = None  # where to tell `tpumem profile` how the run ended

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
    from tpumem.trace.metadata import SETTINGS_VARIABLES

    return {
        "framework": framework,
        "source": source,
        "command": tuple(command),
        "cwd": os.getcwd(),
        "host": platform.node(),
        "pid": os.getpid(),
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


def _tell_ending(config: RunConfig, ending: dict[str, Any]) -> None:
    """How the run ended, for `tpumem profile`: one JSON line on the status pipe."""
    if config.status_fd is None:
        return
    try:
        os.write(config.status_fd, json.dumps(ending).encode() + b"\n")
        os.close(config.status_fd)
    except OSError:
        pass  # tpumem is gone: nobody to tell


def read_ending(descriptor: int) -> dict[str, Any] | None:
    """What the runner said on the status pipe (None: it said nothing, it was killed).
    Read without waiting: a process the script forked may hold the pipe open."""
    os.set_blocking(descriptor, False)
    data = b""
    try:
        while chunk := os.read(descriptor, 65536):
            data += chunk
    except BlockingIOError:
        pass
    finally:
        os.close(descriptor)
    try:
        ending = json.loads(data.splitlines()[0]) if data else None
    except ValueError:
        return None
    return ending if isinstance(ending, dict) else None


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


def main() -> None:
    config = RunConfig.from_json(os.environ.pop(CONFIG_VARIABLE))
    _die_with_parent(config.parent_pid)
    from tpumem.adapters import CaptureOptions, get_adapter
    from tpumem.errors import TpumemError
    from tpumem.trace.metadata import ExitStatus
    from tpumem.trace.records import encode
    from tpumem.trace.writer import TraceWriter

    runner_pid = os.getpid()
    for descriptor in (config.output_fd, config.status_fd):
        if descriptor is not None:  # the script's own programs get neither
            os.set_inheritable(descriptor, False)
    target = config.output if config.output_fd is None else config.output_fd
    writer = TraceWriter(target, _metadata(config))
    adapter = get_adapter(config.framework)(CaptureOptions(**config.capture))
    try:
        adapter.start(writer)
    except (ImportError, TpumemError) as failure:
        writer.patch_metadata(warnings=[f"the {config.framework} adapter failed: {failure}"])
        writer.close()
        print(f"tpumem: error: the {config.framework} adapter failed: {failure}", file=sys.stderr)
        _tell_ending(config, {"adapter_failed": True})
        sys.exit(ADAPTER_FAILED)
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
            try:
                adapter.stop()
            finally:
                writer.patch_metadata(exit=exit_info, end_time_ns=writer.now_ns())
                writer.close()
    # (A process the script forked ends here too, as it would have without tpumem:
    # the trace and the adapter are the runner's, and it leaves them alone.)
    if os.getpid() == runner_pid:
        _tell_ending(config, {"exit": encode(exit_info)})
    if os.getpid() == runner_pid and writer.failed is not None:
        why = writer.failed.strerror or str(writer.failed)
        print(
            f"tpumem: the trace stopped early: {why}; {config.output} keeps what was "
            "written before",
            file=sys.stderr,
        )
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
