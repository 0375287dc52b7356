"""The TensorFlow adapter: allocator events from profiler sessions, counters from
`tf.config.experimental.get_memory_info`, for every device.

On the CPU, TensorFlow's default allocator reports little or nothing. With
TF_CPU_ALLOCATOR_USE_BFC=true, set before TensorFlow loads, the CPU allocator is a
BFC allocator like the GPU's, with the same events and counters; the adapter sets
it unless told not to (or the user set it). A script that starts TensorFlow's
profiler itself still gets its profile: the capture hands the profiler over, and
reads that session's events from the script's own logdir when it stops.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tpumem.adapters.base import (
    Adapter,
    CaptureOptions,
    Patches,
    Sampler,
    mark_numbered_steps,
    on_step_annotation,
    register,
)
from tpumem.adapters.call_stacks import CallStacks
from tpumem.adapters.keras_steps import KerasSteps
from tpumem.adapters.process_identity import agreed_run_id, from_tf_config
from tpumem.adapters.profiler_chunks import ProfilerChunks, newest_xspace, newest_xspace_file
from tpumem.adapters.tensorflow.allocator_stacks import TfStacks
from tpumem.adapters.tensorflow.devices import device_name
from tpumem.adapters.tensorflow.framework import FRAMEWORK
from tpumem.adapters.tensorflow.function_steps import FunctionSteps
from tpumem.adapters.tensorflow.host_transfers import HostTransfers
from tpumem.adapters.tensorflow.input_pipeline import label_pipeline
from tpumem.adapters.tensorflow.variable_kinds import VariableKinds
from tpumem.adapters.xla_dump import XlaDump, close_dump, install_dump
from tpumem.trace.metadata import DeviceInfo
from tpumem.trace.schema import ALLOCATOR, COUNTER
from tpumem.trace.writer import TraceWriter

CPU_BFC_VARIABLE = "TF_CPU_ALLOCATOR_USE_BFC"
# The BFC CPU allocator's limit: TensorFlow's default CPU allocator ignores it.
CPU_LIMIT_VARIABLE = "TF_CPU_BFC_MEM_LIMIT_IN_MB"
# TSL's functions that TensorFlow's framework library exports (C++ names, mangled).
_HAS_ACTIVE_SESSION = "_ZN3tsl8profiler12ProfilerLock16HasActiveSessionEv"
_THREADPOOL_LISTENER_OFF = "_ZN3tsl8profiler19threadpool_listener10DeactivateEv"
# The mark (its `text`) of an eager optimizer update in a loop that numbers no steps.
OPTIMIZER_UPDATE = "optimizer update (eager)"
# The mark of where such a loop's first step began: its GradientTape opened.
FIRST_TAPE = "first GradientTape opened (eager)"
FUNCTION_STEP = "tf.function step"
_WATCH_S = 0.1  # while a session records every allocation: how often the sampler wakes


class _TfSessions:
    """TensorFlow's profiler sessions, each exported to a spool directory (its
    `stop()` gives trace-viewer events, not the XSpace with the memory stats).

    A session's host tracer also turns on TSL's thread-pool listener, which
    records three events for every closure a thread pool runs: two thirds of
    what a session of the transformer example holds, none of it allocator
    events. Gathering a session's events when it stops costs a few microseconds
    an event, on the cores the program trains on, so the listener is turned off
    as soon as each session has started (what its own stop does anyway)."""

    def __init__(self, spool: Path) -> None:
        from tensorflow.python.framework import errors
        from tensorflow.python.profiler.internal import _pywrap_profiler

        self._pywrap = _pywrap_profiler
        self._busy = errors.AlreadyExistsError
        self._spool = spool
        self._count = 0
        self._has_active_session = _framework_function(_HAS_ACTIVE_SESSION, ctypes.c_bool)
        self._threadpool_listener_off = _framework_function(_THREADPOOL_LISTENER_OFF, None)

    def open(self) -> tuple[Any, Path] | None:
        logdir = self._spool / f"chunk-{self._count}"
        session = self._pywrap.ProfilerSession()
        try:
            session.start(str(logdir), {})
        except self._busy:
            return None
        if self._threadpool_listener_off is not None:
            self._threadpool_listener_off()
        self._count += 1
        return session, logdir

    def collect(self, session: tuple[Any, Path]) -> bytes | Path:
        handle, logdir = session
        handle.export_to_tb()  # lets go of the GIL while it gathers and writes
        written = newest_xspace_file(logdir)
        try:
            if written is None:
                return b""
            # The file, not its bytes: the reader process reads it (session_reader.py).
            return written.rename(logdir.with_suffix(".xplane.pb"))
        finally:
            shutil.rmtree(logdir, ignore_errors=True)

    def busy(self) -> bool | None:
        return None if self._has_active_session is None else bool(self._has_active_session())


# Why a multi-worker run has no allocator events: TensorFlow's profiler corrupts
# its own memory when it records allocations while collectives run.
_WHY_NO_EVENTS = (
    "TensorFlow's own profiler ends such a run with SIGSEGV now and then (4 of 12 "
    "two-worker runs with tf.profiler.experimental alone, none with host_tracer_level=1, "
    "which records no allocations); the peak and the bytes in use are the allocators' "
    "counters, and one worker profiled without TF_CONFIG records each allocation"
)
MULTI_WORKER_NO_EVENTS = (
    "allocator events: not recorded in a multi-worker run (TF_CONFIG names more than one "
    f"task): {_WHY_NO_EVENTS}"
)
COLLECTIVES_NO_EVENTS = (
    "allocator events: not recorded from when the script enabled collectives across "
    f"workers (MultiWorkerMirroredStrategy): {_WHY_NO_EVENTS}"
)


def multi_worker(tf_config: str | None) -> bool:
    """Whether TF_CONFIG makes this process one of several tasks whose collectives
    run while a profiler session records."""
    task = from_tf_config(tf_config)
    return task is not None and (task.count or 0) > 1


def _framework_function(symbol: str, returns: Any) -> Any | None:
    """A function of no arguments that TensorFlow's framework library exports
    (`ProfilerLock::HasActiveSession()`: whether a session holds the profiler,
    asked without starting one; `threadpool_listener::Deactivate()`). None where
    this build does not export it."""
    import tensorflow

    library = Path(tensorflow.__file__).parent / "libtensorflow_framework.so.2"
    try:
        function = ctypes.CDLL(str(library))[symbol]
    except (OSError, AttributeError):
        return None
    function.restype, function.argtypes = returns, []
    return function


def _agree(key: str, mine: str) -> str | None:
    """The run id through TensorFlow's coordination service
    (process_identity.agreed_run_id)."""
    from tensorflow.python.eager import context
    from tensorflow.python.framework import errors

    handle = context.context()
    try:
        handle.set_config_key_value(key, mine)
    except errors.AlreadyExistsError:
        pass  # another task set it first
    except Exception:  # no coordination service (a cluster without one)
        return None
    try:
        return str(handle.get_config_key_value(key))
    except Exception:
        return None


def _without_bfc(events: int) -> str:
    """What a CPU run without TF_CPU_ALLOCATOR_USE_BFC has, said as it was found.
    TensorFlow's default CPU allocator is oneDNN's ("mklcpu", which reports its
    allocations) where oneDNN is on, by default only on some x86 CPUs; elsewhere
    it is the plain one, which reports nothing."""
    remedy = (
        f"{CPU_BFC_VARIABLE}=true in the environment before TensorFlow starts gives them "
        "(tpumem profile, %load_ext tpumem and the pytest plugin set it unless told not to)"
    )
    if not events:
        return (
            f"{CPU_BFC_VARIABLE} is not true: TensorFlow's default CPU allocator reported "
            "no allocations and has no counters (oneDNN's, which reports them, is the "
            "default only where oneDNN is on: TF_ENABLE_ONEDNN_OPTS), so this trace holds "
            f"no CPU memory figures; {remedy}"
        )
    return (
        f"{CPU_BFC_VARIABLE} is not true: TensorFlow's default CPU allocator (oneDNN's "
        '"mklcpu") reported its allocations to the profiler, but get_memory_info gives no '
        f"counters for it, so nothing between profiler sessions is sampled; {remedy}"
    )


@register
class TensorFlowAdapter(Adapter):
    framework = FRAMEWORK

    def __init__(self, options: CaptureOptions) -> None:
        super().__init__(options)
        self._sampler: Sampler | None = None
        self._warnings: list[str] = []
        self._spool: Path | None = None
        self._chunks: ProfilerChunks | None = None
        self._dump: XlaDump | None = None
        self._devices_found = False
        self._cpu_without_bfc = False
        self.devices: list[str] = []
        self.counted: list[str] = []
        self._unevented: list[str] = []  # the counted devices no session's events cover
        self._patches = Patches()

    # Whether tpumem set CPU_BFC_VARIABLE in this process (set_before_start).
    set_cpu_bfc = False

    @classmethod
    def environment(cls, options: CaptureOptions, current: Mapping[str, str]) -> dict[str, str]:
        if options.cpu_allocator_events and CPU_BFC_VARIABLE not in current:
            cls.set_cpu_bfc = True
            return {CPU_BFC_VARIABLE: "true"}
        return {}

    @classmethod
    def runtime_started(cls) -> bool:
        context = sys.modules.get("tensorflow.python.eager.context")
        handle = context.context_safe() if context is not None else None
        return bool(getattr(handle, "_initialized", False))

    def start(self, writer: TraceWriter) -> None:
        # Functions compiled with XLA (jit_compile=True): XLA reads XLA_FLAGS when
        # it first compiles.
        self._dump = install_dump(self.options, self._warnings)
        limit = os.environ.get(CPU_LIMIT_VARIABLE)
        if limit and TensorFlowAdapter.set_cpu_bfc:
            # Where tpumem's setting changes what a script can do: a limit
            # the script's own run ignores holds under tpumem.
            self._warnings.append(
                f"{CPU_LIMIT_VARIABLE}={limit} caps the CPU's memory only because tpumem set "
                f"{CPU_BFC_VARIABLE}=true: without tpumem TensorFlow's default CPU allocator "
                "ignores it (--no-cpu-allocator-events leaves the allocator as it was)"
            )
        import tensorflow as tf
        from tensorflow.python.eager import context

        self.writer = writer
        if self._warnings:  # said now: a run the limit brings down never reaches stop()
            writer.patch_metadata(warnings=list(self._warnings))
            self._warnings.clear()  # (patches add up: stop() says the rest)
        self._function_steps = FunctionSteps(self._patches, self._function_step_began)
        self._kinds = VariableKinds(
            writer,
            self._patches,
            tf,
            self._optimizer_updated,
            self._peak_moved,
            self._function_steps.traced,
        )
        self._peaks: dict[str, int] = {}
        self._annotated = False  # the script numbers its steps itself
        self._updates = 0
        self._tape_opened_ns: int | None = None  # the first eager tape before any update
        self._function_calls = 0
        self._kinds.install()
        self._function_steps.install()
        self._keras = KerasSteps(writer, self._patches, self._kinds.model)
        self.tf = tf
        self._watch_first_tape()
        self._context = context
        writer.patch_metadata(framework_version=tf.__version__)
        self._spool = Path(tempfile.mkdtemp(prefix="tpumem-tf-"))
        stacks = CallStacks(writer, self.options.native_frames, self.options.stacks)
        self._transfers = HostTransfers(writer.start_time_ns, stacks)
        self._transfers.install(self._patches)
        self._stacks = TfStacks(stacks, writer.start_time_ns)
        if stacks.enabled:
            self._stacks.install(self._patches)
        if multi_worker(os.environ.get("TF_CONFIG")):
            writer.patch_metadata(not_exposed=[MULTI_WORKER_NO_EVENTS])
        else:
            self._chunks = ProfilerChunks(
                writer, _TfSessions(self._spool), self.options.chunk_s, self._label
            )
            self._take_over_profiler_api(self._chunks)
            self._end_sessions_before_collectives()
        self._mark_traced_steps()
        if self._chunks is not None:
            self._chunks.start()
        self._sampler = Sampler("tpumem-tf-samples", self.options.sample_interval_s, self._tick)
        self._sampler.start()

    def _end_sessions_before_collectives(self) -> None:
        """A script that sets TF_CONFIG itself once TensorFlow is imported enables
        collectives across workers when it makes its strategy: tpumem's sessions
        end there, before the first collective, and the counters go on alone."""
        adapter, original = self, self._context.Context.enable_collective_ops

        def enable_collective_ops(context: Any, server_def: Any) -> Any:
            chunks, adapter._chunks = adapter._chunks, None
            if chunks is not None:
                try:
                    chunks.stop()
                    adapter._warnings.extend(chunks.warnings)
                except Exception as error:  # the script's strategy is made all the same
                    adapter._warnings.append(f"the profiler sessions could not end: {error}")
                # Counters alone from here, for the devices already read too.
                adapter._unevented = list(adapter.counted)
                adapter.writer.patch_metadata(not_exposed=[COLLECTIVES_NO_EVENTS])
                if adapter.counted:
                    adapter.writer.patch_metadata(fidelity=dict.fromkeys(adapter.counted, COUNTER))
            return original(context, server_def)

        enable_collective_ops.__doc__ = original.__doc__
        self._patches.replace(self._context.Context, "enable_collective_ops", enable_collective_ops)

    def _label(self, columns: dict[str, Any]) -> dict[str, Any]:
        """What the profiler's events lack: host copies' and the input pipeline's
        labels, call stacks."""
        columns = label_pipeline(self._transfers.label(columns))
        return self._stacks.label(columns) if self._stacks.stacks.enabled else columns

    def _devices_ready(self) -> bool:
        """Whether the script has started TensorFlow's runtime, and then its devices
        are read. Listing devices starts the runtime, after which a script can no
        longer set its threads, memory growth or logical devices: tpumem waits."""
        if self._devices_found:
            return True
        ctx = self._context.context_safe()
        if ctx is None or not getattr(ctx, "_initialized", False):
            return False
        tf = self.tf
        devices = [device_name(d.name) for d in tf.config.list_logical_devices()]
        self.devices = [d for d in devices if d.split(":")[0] in ("CPU", "GPU", "TPU")]
        self.counted = [d for d in self.devices if self._memory_info(d) is not None]
        kinds = {d.split(":")[0] for d in self.devices}
        backend = "tpu" if "TPU" in kinds else "gpu" if "GPU" in kinds else "cpu"
        cpu_bfc = os.environ.get(CPU_BFC_VARIABLE, "").lower() in ("1", "true")

        # BFC allocators (the GPUs', the CPU's where tpumem set it) write an event with
        # their counters at every allocation, where sessions record them; TPU memory
        # has no such events.
        def evented(device: str) -> bool:
            if self._chunks is None:
                return False
            return device.startswith("GPU") or (device == "CPU:0" and cpu_bfc)

        self._unevented = [d for d in self.counted if not evented(d)]
        self._cpu_without_bfc = backend == "cpu" and not cpu_bfc
        self.writer.patch_metadata(
            backend=backend,
            devices=[DeviceInfo(d, d.split(":")[0]) for d in self.devices],
            fidelity={d: ALLOCATOR if evented(d) else COUNTER for d in self.counted},
        )
        # Which task of a multi-worker cluster: TF_CONFIG, as TensorFlow read it when
        # its runtime started (a script may set it itself, after tpumem started).
        task = from_tf_config(os.environ.get("TF_CONFIG"))
        if task is not None:
            self.identify(self.writer, task, agreed_run_id(task.count, _agree))
        self._devices_found = True
        return True

    def stop(self) -> None:
        # The variables once more, all of them, while the capture still runs: a
        # peak in the last step has a reading after it.
        with contextlib.suppress(Exception):
            self._kinds.tell_now(final=True)
        if self._sampler is not None:
            self._sampler.stop()
            self._warnings.extend(self._sampler.warnings())
        if self._devices_ready():
            self._sample_once()
        if self._chunks is not None:
            self._chunks.stop()
            self._warnings.extend(self._chunks.warnings)
            if self._cpu_without_bfc:
                self._warnings.append(_without_bfc(self._chunks.stats.events))
        if self._spool is not None:
            shutil.rmtree(self._spool, ignore_errors=True)
        close_dump(self._dump, self.writer, False, self._warnings)
        self.writer.patch_metadata(allocator_settings=self._settings(), warnings=self._warnings)
        self._patches.undo()

    def _memory_info(self, device: str) -> dict[str, int] | None:
        try:
            return self.tf.config.experimental.get_memory_info(device)
        except ValueError:  # no allocator statistics for this device (plain CPU)
            return None

    def _tick(self) -> float | None:
        self._keras.watch()  # first: a sample that fails or stalls must not keep it back
        self._kinds.watch()
        recording = self._chunks is not None and self._chunks.recording
        if self._devices_ready():
            self._sample_once(between_sessions=not recording)
        if self._dump is not None:
            self._dump.tick(self.writer)
        if recording and self._devices_found and not self._unevented:
            # Nothing to read until the session stops: wake for the gap, and for
            # Keras' import, not a hundred times a second on the training loop's cores.
            assert self._chunks is not None
            return min(_WATCH_S, self._chunks.seconds_to_rotation())
        return None

    def _sample_once(self, between_sessions: bool = True) -> None:
        """Reads the counters; while a session records, only of the devices whose
        events it does not record: the others' events carry bytes in use and the
        running peak at every allocation, and reading them 100 times a second as
        well cost the training loop about as much CPU as reading the sessions."""
        for device in self.counted if between_sessions else self._unevented:
            info = self._memory_info(device)
            if info is not None:
                self.writer.sample(
                    device=device, bytes_in_use=info["current"], peak_bytes_in_use=info["peak"]
                )

    def _mark_traced_steps(self) -> None:
        """Marks each `Trace(..., step_num=N)` as it opens. The profiler records the
        same step only when the step ends inside a session: a step that ends in
        the gap between two sessions (a first step that traces for seconds) would
        otherwise have no mark."""
        from tensorflow.python.profiler import trace

        marked, kinds = mark_numbered_steps(self.writer), self._kinds

        def mark(name: str, step: int | None) -> None:
            marked(name, step)
            if step is not None:
                self._annotated = True
                kinds.tell_now()  # between steps, on the script's thread

        self._patches.on_undo(on_step_annotation(trace.Trace, mark))

    def _peak_moved(self) -> bool:
        """Whether an allocator's own running peak rose since the last call."""
        moved = False
        for device in self.counted:
            info = self._memory_info(device)
            if info is not None and info["peak"] > self._peaks.get(device, -1):
                self._peaks[device] = info["peak"]
                moved = True
        return moved

    def _watch_first_tape(self) -> None:
        """Where an eager custom loop's first step began: the first GradientTape
        opened before its first optimizer update (its forward pass is under
        that tape; the first of a GAN's two, the outer of nested ones). Later
        steps begin where the update before them ended."""
        from tensorflow.python.eager import backprop

        adapter, eager = self, self.tf.executing_eagerly
        original = backprop.GradientTape.__enter__

        def enter(tape: Any) -> Any:
            # (A tape traced into a tf.function is none of an eager loop's.)
            if adapter._updates == 0 and adapter._tape_opened_ns is None and eager():
                adapter._tape_opened_ns = time.time_ns()
            return original(tape)

        self._patches.replace(backprop.GradientTape, "__enter__", enter)

    def _optimizer_updated(self) -> None:
        """An eager custom loop marks no steps: where neither the script nor
        Keras' fit() numbers them, each eager optimizer update ends one (the
        next step's ops are those run until the next update ends); the first
        begins where its tape opened."""
        if self._annotated or self._keras.marked:
            return
        opened, self._tape_opened_ns = self._tape_opened_ns, None
        if self._updates == 0 and opened is not None:
            at = opened - self.writer.start_time_ns
            self.writer.mark(FIRST_TAPE, step=0, time_ns=at)
            self._updates = 1
        self.writer.mark(OPTIMIZER_UPDATE, step=self._updates)
        self._updates += 1

    def _function_step_began(self, wall_ns: int, now: bool) -> None:
        """A custom loop's tf.function step (function_steps.py) began at `wall_ns`:
        marked where neither the script nor Keras' fit() numbers the steps, and
        (`now`: before it runs) the variables read between steps, as at a step
        annotation."""
        if self._annotated or self._keras.marked:
            return
        at = wall_ns - self.writer.start_time_ns
        self.writer.mark(FUNCTION_STEP, step=self._function_calls, time_ns=at)
        self._function_calls += 1
        if now:
            self._kinds.tell_now()

    def _take_over_profiler_api(self, chunks: ProfilerChunks) -> None:
        """tf.profiler.experimental.start/stop would fail while tpumem's session
        runs: wrap them so the script's session replaces tpumem's for its span."""
        from tensorflow.python.profiler import profiler_v2

        original_start, original_stop = profiler_v2.start, profiler_v2.stop
        logdirs: list[str] = []

        def start(logdir: str, options: Any = None) -> None:
            chunks.pause()
            try:
                original_start(logdir, options)
            except Exception:
                chunks.resume(None)
                raise
            logdirs.append(str(logdir))

        def stop(save: bool = True) -> None:
            try:
                original_stop(save)
            finally:
                logdir = logdirs.pop() if logdirs else None
                chunks.resume(newest_xspace(logdir) if save and logdir else None)

        start.__doc__, stop.__doc__ = original_start.__doc__, original_stop.__doc__
        for owner in (profiler_v2, self.tf.profiler.experimental):
            self._patches.replace(owner, "start", start)
            self._patches.replace(owner, "stop", stop)

    def _settings(self) -> dict[str, Any]:
        """What the script set about how much TensorFlow reserves, read at the end
        of the run (memory growth and limits are set after tpumem starts). The
        environment variables are in the metadata from the start (runner.py)."""
        tf = self.tf
        settings: dict[str, Any] = {}
        for gpu in tf.config.list_physical_devices("GPU"):
            name = device_name(gpu.name)
            with contextlib.suppress(ValueError):
                settings[f"{name} memory growth"] = tf.config.experimental.get_memory_growth(gpu)
            for index, config in enumerate(tf.config.get_logical_device_configuration(gpu) or []):
                if config.memory_limit is not None:
                    settings[f"{name} logical device {index} memory limit (MB)"] = (
                        config.memory_limit
                    )
        return settings
