"""`tpumem profile --follow`: every process of the script's tree that imports a
framework records its own trace in the run's directory.

How a process is found: `tpumem profile` puts follow_boot/ (a `sitecustomize`
module) first on PYTHONPATH and the settings in TPUMEM_FOLLOW, so every Python
process the script starts (multiprocessing's spawn, subprocess, torchrun,
torch_xla.launch's workers) runs it before its own code: an import hook, and
nothing more unless the process imports a framework. Then the recording starts
within that import: the adapter's `prepare` before the framework's module runs,
`start` once it has. A process forked from one that records lets the inherited
recording go (it is the parent's) and starts its own.

It ends with the process: in os._exit (how a forked multiprocessing worker ends,
past atexit), at exit otherwise (sys.exit's code, or the uncaught exception), or
where the process runs another program in its place (os.exec*). A process forked
from a recording one that records nothing of its own (it ran another program, as
a fork then exec does, or ended at once) leaves no trace: it is no rank of the
run. A process killed keeps what its trace had written, readable as any cut-short
trace; `tpumem profile` records how it ended where it saw it end (launch/tree.py).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import Any, NoReturn

from tpumem.adapters.base import end_recording
from tpumem.adapters.follow_end import watch_tpumem
from tpumem.adapters.import_watch import ImportWatch
from tpumem.adapters.launch_protocol import FollowConfig
from tpumem.errors import TpumemError
from tpumem.trace.metadata import ExitStatus

SOURCE = "tpumem profile --follow"


_lock = threading.Lock()
_capture: _Capture | None = None  # this process's recording
_watch: ImportWatch | None = None  # waits for the framework's import
_fork_hook = False  # registered in this process (a forked child inherits it)


def framework_spec(name: str, path: Any, target: Any = None) -> Any:
    """The framework's module spec, as the import system finds it; the import that
    runs it starts this process's recording (import_watch.py: the first framework
    that holds the device memory, not a library's look for whether one is
    installed). follow_boot's finder hands the first framework's lookup over here,
    and the watch takes its place."""
    global _watch
    with _lock:
        if _watch is None:
            _watch = ImportWatch(
                _begin_on_import, failed=_import_failed, any_process=True, yielded=_yielded
            )
            _watch.install()
    return _watch.find_spec(name, path, target)


def _begin_on_import(framework: str) -> Any:
    capture = _capture
    if capture is not None and capture.yielded:  # (torch, then torch_xla: its own now)
        try:
            capture.again(framework)
        except Exception as error:  # never the user's import's failure
            _say(f"not recording process {os.getpid()}: {error}")
            return None
        return capture.start
    capture = _begin(framework)
    return capture.start if capture is not None else None


def _yielded(framework: str) -> None:
    """The process imported the framework `framework` yields to (PyTorch/XLA
    after torch): its recording lets go, and starts again as the other's."""
    capture = _capture
    if capture is not None:
        capture.let_go()


def _import_failed(framework: str, error: BaseException) -> None:
    """The process's own import of its framework raised: it goes on as without
    tpumem, and its trace says so and holds nothing more."""
    capture = _capture
    if capture is not None and not capture._ended:
        capture._ended = True
        capture.writer.patch_metadata(
            warnings=[f"the import of {framework} failed: {error!r}; nothing recorded"]
        )
        capture.writer.close()


def finish(ending: ExitStatus) -> None:
    """Ends this process's recording, if it has one (the runner's, with its ending)."""
    capture = _capture
    if capture is not None:
        capture.finish(ending)


def _say(message: str) -> None:
    print(f"tpumem: {message}", file=sys.stderr)


def _begin(framework: str, started: bool = False, forked: bool = False) -> _Capture | None:
    """The recording of this process; None (and one line) where it cannot start:
    the process runs on unrecorded either way. `forked`: in a child forked from a
    recording process, which inherited the framework started."""
    global _capture
    with _lock:
        if _capture is not None:
            return None
        try:
            _capture = _Capture(framework, FollowConfig.from_environment(), forked)
        except Exception as error:  # never the user's import's failure
            _say(f"not recording process {os.getpid()}: {error}")
            return None
    if started:
        _capture.start()
    return _capture


class _Capture:
    def __init__(self, framework: str, config: FollowConfig, forked: bool = False) -> None:
        from tpumem.adapters.run_header import run_metadata
        from tpumem.adapters.trace_name import TraceName
        from tpumem.trace.writer import TraceWriter

        for name, value in config.environment.items():  # the run's, not the parent's
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        capture = dict(config.capture)
        if config.dump_root is not None:
            capture["xla_dump_dir"] = os.path.join(config.dump_root, str(os.getpid()))
            os.makedirs(capture["xla_dump_dir"], exist_ok=True)
        self.framework = framework
        self.forked = forked
        self.tpumem_pid = config.tpumem_pid
        self._capture_options = capture
        self.yielded = False  # let go for the framework it yields to (let_go)
        metadata = run_metadata(framework, SOURCE, _command(), capture, {})
        self.name = TraceName(config.pattern, config.force, metadata["process"])
        self.writer = TraceWriter(self.name.descriptor, metadata)
        self._ended = False
        self._started = False  # the adapter's start ran
        self._exit: ExitStatus | None = None  # what sys.exit or an uncaught error said
        # From the header on: tpumem killed as the framework imports leaves the ending too.
        watch_tpumem(self.tpumem_pid, self._ended_outside)
        self._prepare(framework)

    def _prepare(self, framework: str) -> None:
        from tpumem.adapters import CaptureOptions, get_adapter

        self.adapter = get_adapter(framework)(CaptureOptions(**self._capture_options))
        self.adapter.identified = self.name.settle
        self.adapter.prepare(self.writer)

    def let_go(self) -> None:
        with _lock:
            self.yielded = True
        self.adapter.forget()

    def again(self, framework: str) -> None:
        """The trace starts over as `framework`'s, in the same file."""
        from tpumem.adapters.run_header import run_metadata

        self.framework = framework
        options = self._capture_options
        self.writer.begin_again(run_metadata(framework, SOURCE, _command(), options, {}))
        self._prepare(framework)
        self.yielded = False

    def start(self) -> None:
        try:
            self.adapter.start(self.writer)
        except (ImportError, TpumemError) as failure:
            said = f"the {self.framework} adapter failed: {failure}"
            _say(f"not recording process {os.getpid()}: {said}")
            self.writer.patch_metadata(warnings=[said])
            self._ended = True
            self.writer.close()
            return
        self._started = True
        self._note_endings()
        global _fork_hook
        if not _fork_hook:
            _fork_hook = True
            os.register_at_fork(after_in_child=_forked)

    def finish(self, ending: ExitStatus) -> None:
        with _lock:
            if self._ended:
                return
            self._ended = True
        end_recording(self.adapter, self.writer, ending)
        # (asked after the recording's end: plain PyTorch knows it allocated only
        # once its last chunk is read)
        started = type(self.adapter).runtime_started()
        failed = ending.code or ending.exception or ending.signal
        if not failed and (not started or self._nothing_of_its_own()):
            # It imported the framework but never started its runtime (no device,
            # no array) and ended well: a launcher that spawns the workers
            # (torch_xla.launch, multiprocessing), not a rank. Its trace holds no
            # event: dropped, so that the run's ranks and their spread are the
            # workers'. (One that failed keeps its trace: how it ended.)
            self._drop()

    def _ended_outside(self, ending: ExitStatus, warning: str) -> None:
        """tpumem died first (follow_end.py): how this process ends, written
        before it does."""
        with _lock:
            if self._ended:
                return
            unstarted = not self._started
            self._ended = unstarted
        self.writer.patch_metadata(warnings=[warning])
        if not unstarted:
            self.finish(ending)
            return
        # (killed as its framework imported: no adapter ran, none to stop)
        self.writer.patch_metadata(exit=ending, end_time_ns=self.writer.now_ns())
        self.writer.close()

    def replaced(self, program: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> None:
        """The process is about to run `program` in its place (os.exec*): its
        recording ends here, and a forked child's that recorded nothing goes."""
        with _lock:
            if self._ended:
                return
            self._ended = True
        self.writer.patch_metadata(
            warnings=[f"the process ran {os.fsdecode(program)!r} in its place (exec) here"]
        )
        end_recording(self.adapter, self.writer, None)
        if self._nothing_of_its_own():
            self._drop()

    def _nothing_of_its_own(self) -> bool:
        """A forked child that recorded nothing: the framework it has is its
        parent's, and it ran none of it."""
        return self.forked and self.writer.rows_recorded == 0

    def _drop(self) -> None:
        with contextlib.suppress(OSError):
            self.name.path.unlink()

    def _note_endings(self) -> None:
        """Where this process's end can be seen, and how it ended: os._exit (how a
        forked multiprocessing worker ends, past atexit), sys.exit, an uncaught
        error, and atexit for the rest."""
        capture = self
        exit_, hard_exit, excepthook = sys.exit, os._exit, sys.excepthook

        def noting_exit(code: str | int | None = None) -> NoReturn:
            capture._exit = ExitStatus(code=_code(code))
            exit_(code)

        def ending_exit(status: int) -> NoReturn:  # (os._exit's own parameter name)
            if _capture is not None:  # (this process's own, in a child forked meanwhile)
                _capture.finish(ExitStatus(code=_code(status)))
            hard_exit(status)

        def noting_hook(kind: Any, error: Any, trace: Any) -> None:
            capture._exit = ExitStatus(code=1, exception=f"{kind.__name__}: {error}")
            excepthook(kind, error, trace)

        def ending_before(execute: Any) -> Any:
            # os.execvp, execl, ... all end in os.execv or os.execve.
            def replaced(path: Any, *rest: Any) -> Any:
                if _capture is not None:  # (this process's own, as in ending_exit)
                    _capture.replaced(path)
                return execute(path, *rest)

            return replaced

        sys.exit, os._exit, sys.excepthook = noting_exit, ending_exit, noting_hook
        os.execv, os.execve = ending_before(os.execv), ending_before(os.execve)
        atexit.register(lambda: capture.finish(capture._exit or ExitStatus(code=0)))


def _code(code: object) -> int:
    if code is None:
        return 0
    return code & 0xFF if isinstance(code, int) else 1


def _command() -> list[str]:
    """What the process runs: its argv, and a multiprocessing worker's name."""
    command = list(sys.argv) or ["python"]
    process = sys.modules.get("multiprocessing.process")
    if process is not None:
        name = process.current_process().name
        if name != "MainProcess":
            command.append(f"({name})")
    return command


def _forked() -> None:
    """In a child forked from a recording process: the inherited recording is let
    go (the parent's trace, written by the parent), and the child records itself."""
    global _capture, _lock
    _lock = threading.Lock()  # another thread may have held it when the parent forked
    inherited, _capture = _capture, None
    if inherited is None:
        return
    inherited._ended = True  # the parent ends it
    try:
        inherited.adapter.forget()
        _begin(inherited.framework, started=True, forked=True)
    except Exception as error:  # the child runs on unrecorded
        _say(f"not recording process {os.getpid()}: {error}")
