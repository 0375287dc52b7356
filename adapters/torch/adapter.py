"""The plain PyTorch adapter: every allocation and free of PyTorch's CPU
allocator, from its profiler's memory events (memory_events.py), each with the
user's line and call stack that made it (op_lines.py) and its kind from
PyTorch's own objects (object_kinds.py); steps are the first optimizer's.

- Chunks: the profiler's events are read between two optimizer steps, once a
  chunk's time has passed, and at the end; a run without an optimizer is read
  at the end only.
- A profiler of the script's own pauses the recording (one profiler runs at a
  time in a process): the trace marks the gap.
- CUDA: its allocations are not recorded by this version; the trace says so
  where the script used a GPU.
- Tensors made before the recording started (`tpumem.track` in a process that
  had them) are found among the live objects at the start.
"""

from __future__ import annotations

import functools
import gc
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tpumem.adapters.base import Adapter, CaptureOptions, Every, Patches, register
from tpumem.adapters.book_rows import FOUND, BookRows
from tpumem.adapters.call_stacks import NOWHERE, CallStacks
from tpumem.adapters.optimizer_steps import OptimizerSteps
from tpumem.adapters.torch.exit_guard import end_before_library_destructors
from tpumem.adapters.torch.framework import FRAMEWORK
from tpumem.adapters.torch.memory_events import CPU, ProfilerSession, read_events
from tpumem.adapters.torch.object_kinds import ObjectKinds
from tpumem.adapters.torch.op_lines import OpLines, line_mode, places_of
from tpumem.trace.metadata import DeviceInfo
from tpumem.trace.schema import ALLOCATOR, CAPTURE_GAP, CAPTURE_RESUMED
from tpumem.trace.writer import TraceWriter

DEVICE = "CPU:0"
OUTPUT = "output"  # an op's result (book_rows' word, the analysis' OP_OUTPUT)
# Kineto, PyTorch's profiler library, logs an error line on a machine without a
# GPU ("gpuGetDeviceCount failed") the first time a profiler starts: into the
# script's stderr, where it was not. Its level, unless the script sets it: errors
# of a profiler of the script's own are then not logged either (the trace says so).
KINETO_LEVEL_VARIABLE = "KINETO_LOG_LEVEL"
_QUIET = "5"

Hook = TypeVar("Hook", bound=Callable[..., Any])


@register
class TorchAdapter(Adapter):
    framework = FRAMEWORK

    def __init__(self, options: CaptureOptions) -> None:
        super().__init__(options)
        self._warnings: list[str] = []
        self._patches = Patches()
        self._rows = BookRows()
        self._live: dict[int, tuple[int, int]] = {}  # address -> (buffer id, bytes)
        self._next_id = 0
        self._cuda_events = 0
        self._chunks = Every(options.chunk_s)
        self._lock = threading.Lock()  # one chunk read at a time
        self._session: ProfilerSession | None = None
        self._mode: Any = None
        self._steps: OptimizerSteps | None = None
        self._kinds: ObjectKinds | None = None
        self._imported_before = True
        self._failure: str | None = None  # the first error a hook caught
        self._exit_guarded = False

    @classmethod
    def environment(cls, options: CaptureOptions, current: Mapping[str, str]) -> dict[str, str]:
        return {} if KINETO_LEVEL_VARIABLE in current else {KINETO_LEVEL_VARIABLE: _QUIET}

    def prepare(self, writer: TraceWriter) -> None:
        # Tensors can be alive at the start only where torch was imported before.
        self._imported_before = "torch" in sys.modules

    # Whether a recording in this process has seen PyTorch allocate (a launcher
    # that imports torch and spawns the workers allocates nothing of its own).
    allocated = False

    @classmethod
    def runtime_started(cls) -> bool:
        """Whether the process made a tensor: PyTorch starts no runtime, so this
        is a recording's own view of its allocator, or CUDA's start."""
        if cls.allocated:
            return True
        torch = sys.modules.get("torch")
        try:
            return bool(torch is not None and torch.cuda.is_initialized())
        except Exception:  # (a torch too broken to say)
            return False

    # -- start and stop ----------------------------------------------------------

    def start(self, writer: TraceWriter) -> None:
        import torch

        self.writer, self.torch = writer, torch
        self.origin = writer.start_time_ns
        writer.patch_metadata(
            framework_version=torch.__version__,
            backend="cpu",
            devices=[DeviceInfo(DEVICE, "CPU")],
            fidelity={DEVICE: ALLOCATOR},
            not_exposed=[
                "the allocator's pool: PyTorch's CPU allocator is the C library's, "
                "one allocation per tensor storage",
            ],
        )
        self.lines = OpLines(CallStacks(writer, self.options.native_frames, self.options.stacks))
        self._session = ProfilerSession(torch)
        self._kinds = ObjectKinds(torch, writer, DEVICE, self._guarded)
        if self._imported_before:
            self._found_before(torch)
        self._session.start()
        self._mode = line_mode(torch, self.lines)
        self._mode.__enter__()
        self._steps = OptimizerSteps(
            torch, self._mode, self._guarded(self._stepped), before=self._guarded(self._stepping)
        )
        self._steps.install()
        self._kinds.install(torch)
        self._share_the_profiler(torch)

    def _found_before(self, torch: Any) -> None:
        """The storages of the CPU tensors alive at the start (none where the
        recording starts with the script's import of torch)."""
        seen: dict[int, int] = {}
        tensor = torch.Tensor
        for value in gc.get_objects():
            # (type(), not isinstance: an object's __class__ may be a property that warns)
            if issubclass(type(value), tensor):
                try:
                    if value.is_cpu and value.layout == torch.strided:
                        storage = value.untyped_storage()
                        seen[storage.data_ptr()] = storage.nbytes()
                except Exception:  # (a subclass without storage)
                    continue
        label = (None, FOUND, None, None, NOWHERE)
        for address, size in seen.items():
            if address and size:
                self._live[address] = (self._next_id, size)
                self._rows.alloc(0, DEVICE, self._next_id, address, size, size, label)
                self._next_id += 1
        if seen:
            self._warnings.append(
                f"{len(seen)} tensor storages were alive before tpumem started: recorded "
                "from the start, with no line"
            )

    def _guarded(self, hook: Hook) -> Hook:
        """The hook, never raising into the script: its first error goes to the
        trace's warnings, and the run goes on."""

        @functools.wraps(hook)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return hook(*args, **kwargs)
            except Exception as error:
                if self._failure is None:
                    self._failure = f"{type(error).__name__}: {error}"
                return None

        return guarded  # type: ignore[return-value]

    def forget(self) -> None:
        """Lets go, writing nothing: the profiler stopped unread and every hook
        gone (the recording yields to PyTorch/XLA's, or a forked child's own)."""
        self._unhook()
        if self._session is not None:
            self._session.stop()
            if self._session.started and not self._exit_guarded:
                self._exit_guarded = end_before_library_destructors()

    def _unhook(self) -> None:
        if self._steps is not None:
            self._steps.remove()
        if self._mode is not None:
            self._mode.__exit__(None, None, None)
            self._mode = None
        if self._kinds is not None:
            self._kinds.remove()
        self._patches.undo()

    def stop(self) -> None:
        self._unhook()
        session = self._session
        if session is not None and session.running:
            if threading.get_ident() == session.thread_id:
                self._hand_over(session.stop())
            else:  # (the profiler's state is its thread's: it cannot be stopped here)
                self._warnings.append(
                    "the recording ended on another thread than the one it started on: "
                    "the allocations since its last step are not in the trace"
                )
        self._write_rows()
        if not self._exit_guarded and self._session is not None and self._session.started:
            self._exit_guarded = end_before_library_destructors()
        if self._failure is not None:
            self._warnings.append(
                f"tpumem's PyTorch hooks failed at least once ({self._failure}); the run went on"
            )
        if self._cuda_events:
            self._warnings.append(
                f"the script used CUDA ({self._cuda_events:,} allocator events): this version "
                "records PyTorch's CPU memory only; for the GPU, `tpumem import` a "
                "torch.cuda.memory snapshot"
            )
        self.writer.patch_metadata(warnings=self._warnings)

    # -- steps and chunks --------------------------------------------------------

    def _stepping(self, optimizer: Any) -> None:
        self.lines.begin_step(optimizer)
        assert self._kinds is not None
        self._kinds.step_begins(optimizer)

    def _stepped(self, optimizer: Any) -> None:
        self.lines.end_step(optimizer)
        assert self._kinds is not None
        self._kinds.step_ended(optimizer)
        session = self._session
        if (
            session is not None
            and session.running
            and threading.get_ident() == session.thread_id
            and self._chunks.due()
        ):
            self._hand_over(session.rotate())

    def _hand_over(self, result: Any) -> None:
        """A stopped profiler's result read into rows, with the calls seen meanwhile,
        on the profiler's own thread: read on another while the profiler records
        again, PyTorch's results corrupted the heap (`free(): invalid next size`,
        about one run in ten)."""
        if result is not None:
            self._read(result, self.lines.take(), self.torch.cuda.is_initialized())
            self._write_rows()

    def _read(self, result: Any, calls: Any, devices: bool) -> None:
        """One chunk's events as alloc and free rows, each allocation at the line
        of the call under way."""
        assert self._session is not None
        events = read_events(result, self._session.allocation, devices)
        with self._lock:
            starts, ends, places = calls
            on_cpu = events.devices == CPU
            if len(events):
                TorchAdapter.allocated = True
            self._cuda_events += int((~on_cpu).sum())
            times = events.times[on_cpu]
            calls = places_of(times, starts, ends, places)
            live, rows, origin = self._live, self._rows, self.origin
            for time_ns, address, size, (op, place) in zip(
                (times - origin).tolist(),
                events.addresses[on_cpu].tolist(),
                events.sizes[on_cpu].tolist(),
                calls,
                strict=True,
            ):
                if size > 0:
                    earlier = live.get(address)
                    if earlier is not None:  # (its free was not seen: a gap)
                        rows.free(time_ns, DEVICE, earlier[0], address, earlier[1])
                    live[address] = (self._next_id, size)
                    label = (op, OUTPUT, None, None, place)
                    rows.alloc(time_ns, DEVICE, self._next_id, address, size, size, label)
                    self._next_id += 1
                else:
                    found = live.pop(address, None)
                    if found is not None:  # (else made before the recording: not seen)
                        rows.free(time_ns, DEVICE, found[0], address, found[1])

    def _write_rows(self) -> None:
        with self._lock:
            made = self._rows.take()
        if made:
            self.writer.write_columns(*self._rows.columns(made))

    # -- the script's own profiler -----------------------------------------------

    def _share_the_profiler(self, torch: Any) -> None:
        """A profiler the script starts stops this one first (on its thread), and
        this one starts again when the script's stops."""
        module = torch.autograd.profiler
        session = self._session
        assert session is not None
        paused = threading.Event()

        def pause() -> None:
            if session.running and threading.get_ident() == session.thread_id:
                self._hand_over(session.stop())
                self.writer.mark(CAPTURE_GAP)
                paused.set()

        def wrap_start(original: Any) -> Any:
            def started(*args: Any, **kwargs: Any) -> Any:
                pause()
                return original(*args, **kwargs)

            return started

        def wrap_stop(original: Any) -> Any:
            def stopped(*args: Any, **kwargs: Any) -> Any:
                result = original(*args, **kwargs)
                if paused.is_set() and threading.get_ident() == session.thread_id:
                    paused.clear()
                    session.start()
                    self.writer.mark(CAPTURE_RESUMED)
                return result

            return stopped

        for name in ("_prepare_profiler", "_enable_profiler"):
            self._patches.replace(module, name, wrap_start(getattr(module, name)))
        self._patches.replace(module, "_disable_profiler", wrap_stop(module._disable_profiler))
