"""The profiled process: `python -m tpumem.adapters.runner`, started by `tpumem profile`.

It runs the user's script as `python script.py` would (sys.argv, sys.path[0], a
fresh `__main__`, the working directory untouched), with nothing loaded but
itself and the standard library; when the script imports the framework that
holds its device memory (import_watch.py), it opens the trace and starts that
framework's adapter, inside the import. At the end it records how the run ended
and closes the trace. Its settings come in one environment variable, removed
before the script sees the environment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tpumem.adapters.import_watch import imported_frameworks
from tpumem.adapters.launch_protocol import ADAPTER_FAILED, CONFIG_VARIABLE, LaunchConfig, tell
from tpumem.adapters.parent_death import die_with_parent, ended
from tpumem.adapters.run_header import run_metadata
from tpumem.adapters.script_target import run_target, user_traceback


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _metadata(config: LaunchConfig, framework: str, environment: dict[str, str]) -> dict[str, Any]:
    command = ["-m", config.target] if config.module else [config.target]
    return run_metadata(
        framework,
        "tpumem profile",
        [*command, *config.args],
        config.capture,
        environment,
    )


@dataclass
class _UnopenedTrace:
    """The trace `tpumem profile` created and handed over open, empty until the
    script imports its framework. If tpumem dies meanwhile (SIGKILL), nobody is
    left to remove it or write its header: this process removes it as it ends,
    rather than leave an empty file (tpumem, while it lives, does either)."""

    descriptor: int | None
    path: str
    parent_pid: int | None
    opened: bool = False
    # The runner's own process: a child the script forks inherits the handler
    # (and the descriptor), and must neither remove the trace nor outlive its
    # SIGTERM.
    runner_pid: int = field(default_factory=os.getpid)

    def remove(self) -> None:
        if self.descriptor is None or self.opened:
            return
        try:
            held = os.fstat(self.descriptor)
            if held.st_size == 0 and os.path.samestat(held, os.stat(self.path)):
                os.unlink(self.path)
        except OSError:
            pass  # (another file has its name, or it is gone: not this run's to remove)

    def orphaned(self) -> bool:
        """Whether tpumem has ended (a parent that has not been waited for yet
        is still this process's parent to getppid: its state says)."""
        if self.parent_pid is None:
            return False
        return os.getppid() != self.parent_pid or ended(self.parent_pid)

    def on_sigterm(self, number: int, _frame: Any) -> None:
        """SIGTERM before the trace is opened (the script's own handler replaces
        this one): the empty trace removed where tpumem is gone, then the end
        SIGTERM gives."""
        if os.getpid() == self.runner_pid and not self.opened and self.orphaned():
            self.remove()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def install(self) -> None:
        """SIGTERM handled here until the header is written, where the script has
        no handler of its own; a child forked meanwhile has the default again."""
        if self.descriptor is None or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
            return
        signal.signal(signal.SIGTERM, self.on_sigterm)
        os.register_at_fork(after_in_child=self._default_again)

    def now_opened(self) -> None:
        """The header is on disk: SIGTERM is the script's again, as it was (a
        framework imported in another thread leaves that to on_sigterm, which
        then does what the default does: only the main thread sets handlers)."""
        self.opened = True
        if threading.current_thread() is threading.main_thread():
            self._default_again()

    def _default_again(self) -> None:
        if signal.getsignal(signal.SIGTERM) == self.on_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


class _AdapterFailed(SystemExit):
    """The adapter could not start inside the framework's import: the run ends
    there, said in one line (a profile that records nothing is no profile)."""


@dataclass
class _Recording:
    """The runner's own trace and adapter (without --follow), opened when the
    script imports its framework (import_watch.py)."""

    config: LaunchConfig
    unopened: _UnopenedTrace | None = None
    writer: Any = None
    adapter: Any = None
    name: Any = None  # a TraceName, where the trace's name has placeholders
    watch: Any = None
    started: bool = False  # the adapter's start ran
    ended: bool = False  # the ending is written (by stop, or where tpumem died first)
    set_here: dict[str, str] = field(default_factory=dict)  # set by the adapters, in order
    # One ending: the watch's thread (tpumem died) and the script's end race for it.
    ending: threading.Lock = field(default_factory=threading.Lock)

    def begin(self, framework: str) -> Callable[[], None] | None:
        """The trace opened and the adapter prepared, as the framework's module is
        about to run; returns the adapter's start, for once it has run."""
        config = self.config
        # Said first: a run killed before its trace's header is on disk (loading the
        # writer takes a moment) gets its header from `tpumem profile`, which must
        # know the script had begun to import its framework.
        tell(config.status_fd, {"framework": framework})
        from tpumem.adapters import CaptureOptions, get_adapter
        from tpumem.adapters.base import set_before_start
        from tpumem.errors import TpumemError

        # Any failure here, inside the script's import of its framework, ends the
        # run in one line rather than as the script's own error (which a script
        # that catches ImportError would take for a framework not installed).
        try:
            adapter_class = get_adapter(framework)
            options = CaptureOptions(**config.capture)
            # (what a recording it took over from set stays set: said again)
            self.set_here.update(set_before_start(adapter_class, options))
            metadata = _metadata(config, framework, {**config.environment, **self.set_here})
            if self.writer is not None:  # (a recording that yielded to this framework)
                self.writer.begin_again(metadata)
            else:
                self._open(metadata)
            self.adapter = adapter_class(options)
            if self.name is not None:
                self.adapter.identified = self.name.settle
            self.adapter.prepare(self.writer)
        except TpumemError as failure:
            if self.writer is None:  # (a trace name taken, a framework not installed)
                print(f"tpumem: error: {failure}", file=sys.stderr)
                tell(config.status_fd, {"adapter_failed": True}, last=True)
                raise _AdapterFailed(ADAPTER_FAILED) from None
            self._failed(framework, failure)
        except Exception as failure:
            self._failed(framework, failure)
        return self._starter(framework)

    def _open(self, metadata: dict[str, Any]) -> None:
        """The trace, opened with its header (named by the process where its name
        waits for the rank), and tpumem's death watched from then on."""
        from tpumem.adapters.call_stacks import end_walks_at
        from tpumem.adapters.follow_end import watch_tpumem
        from tpumem.adapters.trace_name import TraceName
        from tpumem.trace.writer import TraceWriter

        config = self.config
        target: str | int = config.output if config.output_fd is None else config.output_fd
        if config.named_here:
            self.name = TraceName(
                config.output,
                config.force,
                metadata["process"],
                lambda path: tell(config.status_fd, {"output": path}),
            )
            target = self.name.descriptor
        self.writer = TraceWriter(target, metadata)
        if self.unopened is not None:
            self.unopened.now_opened()
        # tpumem killed from now on: the ending written before this process
        # ends, not left unrecorded (its parent-death SIGTERM killed it outright).
        watch_tpumem(config.parent_pid, self._ended_outside, "tpumem profile")
        end_walks_at(run_target.__code__)  # the frames beyond it are this runner's

    def _starter(self, framework: str) -> Callable[[], None]:
        def start() -> None:
            try:
                self.adapter.start(self.writer)
            except Exception as failure:
                self._failed(framework, failure)
            self.started = True

        return start

    def yielded(self, framework: str) -> None:
        """The script imported the framework this one yields to (PyTorch/XLA after
        torch): this recording lets go, writing nothing; `begin` starts the
        trace again as the other's."""
        with self.ending:
            adapter, self.adapter, self.started = self.adapter, None, False
            if adapter is not None:
                adapter.forget()

    def _ended_outside(self, ending: Any, warning: str) -> None:
        """tpumem died first (follow_end.py): how the run ends, written before it
        does (from the watch's thread: the script runs on until its SIGTERM)."""
        from tpumem.adapters.base import end_recording

        with self.ending:
            writer, adapter = self.writer, self.adapter
            if writer is None or self.ended:
                return
            self.ended = True
            writer.patch_metadata(warnings=[warning])
            if adapter is not None and self.started:
                end_recording(adapter, writer, ending)
            else:  # (killed as its framework imported: no adapter ran)
                writer.patch_metadata(exit=ending, end_time_ns=writer.now_ns())
                writer.close()

    def import_failed(self, framework: str, error: BaseException) -> None:
        """The script's own import of its framework raised (a broken install, a
        version mismatch): the script goes on with its error as without tpumem;
        the trace says so and holds nothing more (the adapter never started). A
        Ctrl-C (or sys.exit) as it imported is no failed import: the run ends, and
        its ending is recorded as it ends (stop)."""
        if not isinstance(error, Exception):
            self.adapter = None  # (prepared, never started: nothing of it to stop)
            return
        if self.writer is not None:
            self.writer.patch_metadata(
                warnings=[f"the script's import of {framework} failed: {error!r}; nothing recorded"]
            )
            self.writer.close()
            self.writer = self.adapter = None

    def _failed(self, framework: str, failure: Exception) -> None:
        said = f"the {framework} adapter failed: {failure}"
        if self.writer is not None:
            self.writer.patch_metadata(warnings=[said])
            self.writer.close()
            self.writer = None
        print(f"tpumem: error: {said}", file=sys.stderr)
        tell(self.config.status_fd, {"adapter_failed": True}, last=True)
        raise _AdapterFailed(ADAPTER_FAILED)

    def stop(self, exit_info: Any) -> None:
        from tpumem.adapters import get_adapter
        from tpumem.adapters.base import end_recording

        self.watch.remove()
        with self.ending:
            if self.writer is None or self.ended:
                return
            self.ended = True
            if self.adapter is None:  # stopped as its framework imported: how, and no more
                self.writer.patch_metadata(exit=exit_info, end_time_ns=self.writer.now_ns())
                self.writer.close()
                return
            # Another framework the script started too (TensorFlow imports JAX where it
            # is installed and never starts it: imported is not used).
            recorded = self.watch.framework
            also = [
                name
                for name in imported_frameworks()
                if name != recorded
                and recorded not in get_adapter(name).imported_by
                and get_adapter(name).runtime_started()
            ]
            if also:
                self.writer.patch_metadata(
                    warnings=[
                        f"the script also used {' and '.join(also)}, not recorded: tpumem "
                        f"records the first framework it imports (--framework {also[0]} "
                        "records that one)"
                    ]
                )
            end_recording(self.adapter, self.writer, exit_info)

    def unrecorded(self) -> dict[str, Any] | None:
        """Why nothing was recorded, for `tpumem profile` to say; None if it was."""
        if self.writer is not None or self.watch.framework is not None:
            return None
        from tpumem.adapters.import_watch import keras_backend

        return {
            "wanted": self.config.framework or None,
            "imported": imported_frameworks(),
            "keras_backend": keras_backend() if self.watch.passed else None,
        }

    def say_failure(self) -> None:
        failed = self.writer.failed if self.writer is not None else None
        if failed is not None:
            where = self.name.path if self.name is not None else self.config.output
            print(
                f"tpumem: the trace stopped early: {failed.strerror or failed}; {where} "
                "keeps what was written before",
                file=sys.stderr,
            )


def _watch_imports(config: LaunchConfig, unopened: _UnopenedTrace) -> _Recording:
    """The recording, to start when the script imports its framework: nothing of
    the framework, nor the trace's writer, is loaded before the script asks."""
    from tpumem.adapters.import_watch import ImportWatch

    recording = _Recording(config, unopened)
    recording.watch = ImportWatch(
        recording.begin,
        config.framework or None,
        failed=recording.import_failed,
        yielded=recording.yielded,
    )
    recording.watch.install()
    return recording


def main() -> None:
    config = LaunchConfig.from_json(os.environ.pop(CONFIG_VARIABLE))
    unopened = _UnopenedTrace(config.output_fd, config.output, config.parent_pid)
    unopened.install()
    # (One sent meanwhile is delivered here: the script has not begun.)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, config.unblock_signals)
    # SIGTERM when `tpumem profile` dies, however it dies: a run nobody waits for
    # must not go on holding the device. A script that handles SIGTERM (to save a
    # checkpoint) gets to.
    die_with_parent(config.parent_pid, signal.SIGTERM, unopened.remove)
    # The standard library only until the script imports its framework: the
    # trace's types (Arrow, numpy) are imported after the script, or by the
    # recording when it starts.
    runner_pid = os.getpid()
    for descriptor in (config.output_fd, config.status_fd):
        if descriptor is not None:  # the script's own programs get neither
            os.set_inheritable(descriptor, False)
    # With --follow, this process records itself as the script's other processes
    # do: if it imports a framework (follow.py).
    recording = None if config.follow else _watch_imports(config, unopened)
    code, error = 0, None
    ending: dict[str, Any] = {"code": 0}
    try:
        run_target(config.target, config.args, config.module)
    except _AdapterFailed:
        sys.stdout.flush()
        sys.exit(ADAPTER_FAILED)
    except SystemExit as stop:
        code = _exit_code(stop.code)
        ending = {"code": code}
    except BaseException as caught:
        error = caught
        code = 1
        ending = {"code": 1, "exception": f"{type(caught).__name__}: {caught}"}
        if isinstance(caught, KeyboardInterrupt):
            ending = {
                "signal": int(signal.SIGINT),
                "signal_name": "SIGINT",
                "exception": "KeyboardInterrupt",
            }
    finally:
        if os.getpid() == runner_pid:
            with _interrupts_let_by():
                _end(recording, ending)
            if unopened.orphaned():  # (the script handled tpumem's SIGTERM, and ended)
                unopened.remove()
    # (A process the script forked ends here too, as it would have without tpumem:
    # the trace and the adapter are the runner's, and it leaves them alone.)
    if os.getpid() == runner_pid:
        from tpumem.trace.records import encode

        unrecorded = recording.unrecorded() if recording is not None else None
        if unrecorded is not None:
            tell(config.status_fd, {"unrecorded": unrecorded})
        tell(config.status_fd, {"exit": encode(_exit_status(ending))}, last=True)
        if recording is not None:
            recording.say_failure()
    if error is not None:
        trimmed = user_traceback(error, __file__)
        sys.excepthook(type(error), error.with_traceback(trimmed), trimmed)
        if isinstance(error, KeyboardInterrupt):
            # As Python does: die by the signal, so the parent sees how it ended.
            sys.stdout.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
    sys.exit(code)


@contextlib.contextmanager
def _interrupts_let_by() -> Iterator[None]:
    """While tpumem writes how the script ended, a Ctrl-C more (a second press; or
    `timeout -s INT`, which signals the process group and tpumem both) is let by:
    the run is ending already, and a KeyboardInterrupt raised inside tpumem's own
    files read as tpumem's crash, its traceback ending there. (main() runs on the
    main thread, where a handler may be set.)"""
    earlier = signal.signal(signal.SIGINT, lambda number, frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, earlier)


def _exit_status(ending: dict[str, Any]) -> Any:
    from tpumem.trace.metadata import ExitStatus

    return ExitStatus(**ending)


def _end(recording: _Recording | None, ending: dict[str, Any]) -> None:
    """Ends the runner's recording, or with --follow this process's own, if it
    imported a framework (follow.py is loaded only then)."""
    if recording is not None:
        recording.stop(_exit_status(ending))
    elif "tpumem.adapters.follow" in sys.modules:
        sys.modules["tpumem.adapters.follow"].finish(_exit_status(ending))


if __name__ == "__main__":
    main()
