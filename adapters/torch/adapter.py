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
- The profiler starts at the script's first torch call (a script that goes on
  to import torch_xla never starts it); the tensors alive then (`tpumem.track`
  in a process that had them, a pickle's) are found among the live objects.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from tpumem.adapters.base import Adapter, CaptureOptions, Every, Patches, register
from tpumem.adapters.book_rows import FOUND, OUTPUT, BookRows
from tpumem.adapters.call_stacks import NOWHERE, CallStacks
from tpumem.adapters.optimizer_steps import OptimizerSteps
from tpumem.adapters.torch.exit_guard import end_before_library_destructors
from tpumem.adapters.torch.fake_tensors import FakeRun, StepsDone
from tpumem.adapters.torch.framework import FRAMEWORK, ON_CUDA
from tpumem.adapters.torch.memory_events import CPU, ProfilerSession, read_events
from tpumem.adapters.torch.object_kinds import ObjectKinds
from tpumem.adapters.torch.op_lines import OpLines, line_mode, places_of
from tpumem.trace.metadata import DeviceInfo
from tpumem.trace.schema import ALLOCATOR, BUFFER, CAPTURE_GAP, CAPTURE_RESUMED
from tpumem.trace.writer import TraceWriter

DEVICE = "CPU:0"
# Kineto, PyTorch's profiler library, logs an error line on a machine without a
# GPU ("gpuGetDeviceCount failed") the first time a profiler starts: into the
# script's stderr, where it was not. Its level, set as tpumem's profiler first
# starts, unless the script set it: errors of a profiler of the script's own are
# then not logged either (the trace's "Set by tpumem" says so).
KINETO_LEVEL_VARIABLE = "KINETO_LOG_LEVEL"
_QUIET = "5"
# `tpumem fit --gpu`: the backward passes after which a script that stepped no
# torch.optim optimizer is stopped (more than any gradient accumulation's).
NO_OPTIMIZER_BACKWARDS = 64

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
        self._failure: str | None = None  # the first error a hook caught
        self._paused = threading.Event()  # a profiler of the script's runs: this one waits
        self._exit_guarded = False
        self._fake: FakeRun | None = None  # `tpumem fit --gpu`'s run on fake tensors
        self._backwards = 0  # its backward passes

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
        if self.options.fit_steps:
            self._start_fit(torch, writer)
            return
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
        # The profiler starts at the script's first torch call (the mode's), not
        # here: a script that goes on to import torch_xla (a PyTorch/XLA run)
        # never starts Kineto, nor needs its exit guard.
        self.lines.first_call = self._guarded(self._first_call)
        self._mode = line_mode(torch, self.lines)
        self._mode.__enter__()
        self._steps = OptimizerSteps(
            torch,
            self._mode,
            lambda optimizer: None,
            before=self._guarded(self._stepping),
            after=self._guarded(self._stepped),
        )
        self._steps.install()
        self._kinds.install(torch)
        self._share_the_profiler(torch)
        os.register_at_fork(after_in_child=self._guarded(self._in_child))

    def _start_fit(self, torch: Any, writer: TraceWriter) -> None:
        """`tpumem fit --gpu`: the script on fake tensors (fake_tensors.py), its
        kinds told as in a real run, stopped after the steps asked for."""
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        from tpumem.adapters.torch.fake_tensors import DEVICE as GPU
        from tpumem.adapters.torch.fake_tensors import FakeRun

        TorchAdapter.allocated = True  # (nothing is: but the run is PyTorch's)
        writer.patch_metadata(
            framework_version=torch.__version__,
            backend="gpu",
            devices=[DeviceInfo(GPU, self.options.fit_gpu)],
            fidelity={GPU: BUFFER},
            memory_settings=ON_CUDA,
            not_exposed=[
                "the run's memory: its tensors were fake (PyTorch's FakeTensorMode), each "
                "storage's bytes exact, nothing allocated; the caching allocator is modeled",
            ],
        )
        stacks = CallStacks(writer, self.options.native_frames, self.options.stacks)
        fake = self._fake = FakeRun(
            torch,
            writer,
            stacks,
            self.options.fit_gpu,
            (self.options.fit_workspace_bytes, self.options.fit_lt_workspace_bytes),
            self._guarded,
        )
        kinds = self._kinds = ObjectKinds(
            torch, writer, GPU, self._guarded, storage_of=fake.storage
        )
        fake.start()
        kinds.install(torch)
        begins = self._guarded(lambda optimizer, args, kwargs: kinds.step_begins(optimizer))
        ended = self._guarded(lambda optimizer, args, kwargs: kinds.step_ended(optimizer))

        def stepped(optimizer: Any, args: Any, kwargs: Any) -> None:
            ended(optimizer, args, kwargs)
            if kinds.steps >= self.options.fit_steps:  # (the runner's stop() writes the rows)
                raise StepsDone(kinds.steps)

        fake.patches.on_undo(register_optimizer_step_pre_hook(begins).remove)
        fake.patches.on_undo(register_optimizer_step_post_hook(stepped).remove)
        backward = torch.autograd.backward

        def counted(*args: Any, **kwargs: Any) -> Any:
            # (Tensor.backward calls it by this name.) A script that updates its
            # parameters itself steps no optimizer: it stops after a number of
            # backward passes that no optimizer's gradient accumulation reaches.
            result = backward(*args, **kwargs)
            self._backwards += 1
            if not kinds.steps and self._backwards >= NO_OPTIMIZER_BACKWARDS:
                raise StepsDone(0)
            return result

        fake.patches.replace(torch.autograd, "backward", counted)

    def _stop_fit(self, fake: FakeRun) -> None:
        fake.write_rows()
        assert self._kinds is not None
        if self._kinds.steps >= self.options.fit_steps:
            self._warnings.append(
                f"tpumem fit stopped the script as its optimizer's step {self._kinds.steps} "
                f"ended (--steps {self.options.fit_steps})"
            )
        elif not self._kinds.steps and self._backwards >= NO_OPTIMIZER_BACKWARDS:
            self._warnings.append(
                f"the script stepped no torch.optim optimizer in {self._backwards} backward "
                "passes: tpumem fit stopped it there; its parameters' updates, made by the "
                "script itself, are in the trace as other arrays"
            )
        if fake.stand_ins.asked:
            self._warnings.append(
                f"the script asked for {fake.stand_ins.asked:,} tensor values (.item(), a tensor "
                "in an if): fake tensors have none, so it got stand-ins (a factory's value where "
                "it is known, else 1, and a healthy step's truth): what it printed is not the "
                "model's"
            )
        if fake.loaders:
            self._warnings.append(
                f"{fake.loaders:,} DataLoaders made their batches in the script's process, "
                "unpinned: fake tensors do not cross processes"
            )
        self._say_failure()
        self.writer.patch_metadata(warnings=self._warnings)

    def _say_failure(self) -> None:
        if self._failure is not None:
            self._warnings.append(
                f"tpumem's PyTorch hooks failed at least once ({self._failure}); the run went on"
            )

    def _first_call(self) -> None:
        """The script's first torch call on the recorded thread: what it made
        before without one (few: a pickle's tensors) is found alive, and the
        profiler starts."""
        session = self._session
        if session is None or session.started:
            return
        if self.torch.autograd._profiler_enabled():  # the script's own runs: after it
            self.writer.mark(CAPTURE_GAP)
            self._paused.set()
            return
        self._start_profiler()

    def _start_profiler(self) -> None:
        """The profiler's first start, on the recorded thread."""
        assert self._session is not None
        self._found_before(self.torch)
        if KINETO_LEVEL_VARIABLE not in os.environ:  # (read as Kineto first starts)
            os.environ[KINETO_LEVEL_VARIABLE] = _QUIET
            said = dict(self.writer.header.get("set_by_tpumem") or {})
            self.writer.patch_metadata(set_by_tpumem={**said, KINETO_LEVEL_VARIABLE: _QUIET})
        self._session.start()

    def _found_before(self, torch: Any) -> None:
        """The storages of the CPU tensors alive as the profiler starts."""
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
                f"{len(seen)} tensor storages were alive as the recording began (made before "
                "tpumem started, or without a torch call): recorded from then, with no line"
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
        gone (the recording yields to PyTorch/XLA's, or a forked child's own).
        Inside the script's import of torch_xla: never raises."""
        try:
            self._unhook()
            session = self._session
            if session is not None and threading.get_ident() == session.thread_id:
                session.stop()
        except Exception as error:  # (the script's import goes on: said nowhere else)
            if self._failure is None:
                self._failure = f"{type(error).__name__}: {error}"
        if self._session is not None and self._session.started and not self._exit_guarded:
            self._exit_guarded = end_before_library_destructors()

    def _in_child(self) -> None:
        """In a process forked from this one (a DataLoader's worker): nothing is
        recorded there (the trace is this process's), so nothing piles up unread.
        The mode and the hooks pass through, and the profiler the child inherited
        stops, its events dropped."""
        self.lines.recording = False
        if self._kinds is not None:
            self._kinds.inert = True
        session = self._session
        if session is not None and session.running and threading.get_ident() == session.thread_id:
            session.stop()

    def _unhook(self) -> None:
        if self._steps is not None:
            self._steps.remove()
        self._leave_mode()
        if self._kinds is not None:
            self._kinds.remove()
        self._patches.undo()

    def _leave_mode(self) -> None:
        """The mode off the function modes where it is the innermost on this
        thread; where it is not (the script entered one after it, or this is
        another thread) it stays, passing every call through."""
        mode, self._mode = self._mode, None
        if mode is None:
            return
        self.lines.recording = False
        c = self.torch._C
        depth = c._len_torch_function_stack()
        innermost = depth and c._get_function_stack_at(depth - 1) is mode
        if threading.get_ident() == self.lines.thread and innermost:
            c._pop_torch_function_stack()

    def stop(self) -> None:
        if self._fake is not None:
            return self._stop_fit(self._fake)
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
        self._say_failure()
        if self.lines.other_threads:
            self._warnings.append(
                f"{self.lines.other_threads:,} torch calls ran on other threads than the one "
                "that imported torch: PyTorch's profiler records that thread's allocations "
                "only, so theirs are not in the trace"
            )
        if self._cuda_events:
            self._warnings.append(
                f"the script used CUDA ({self._cuda_events:,} allocator events): this version "
                "records PyTorch's CPU memory only; for the GPU, `tpumem import` a "
                "torch.cuda.memory snapshot"
            )
        self.writer.patch_metadata(warnings=self._warnings)

    # -- steps and chunks --------------------------------------------------------

    def _stepping(self, optimizer: Any, plain: bool) -> None:
        if plain:  # (one call, run outside the mode; another's ops go through it)
            self.lines.begin_step(optimizer)
        assert self._kinds is not None
        self._kinds.step_begins(optimizer)

    def _stepped(self, optimizer: Any, plain: bool) -> None:
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
            self._hand_over(session.stop())
            session.start()

    def _hand_over(self, result: Any) -> None:
        """A stopped profiler's result read into rows, with the calls seen meanwhile,
        on the profiler's own thread and before it starts again: read on another
        thread, or on this one once the profiler recorded again, PyTorch's results
        corrupted the heap (`free(): invalid next size`, `malloc(): invalid size`:
        about one run in ten, and one in twenty). Nothing of the script's runs
        meanwhile: it is inside the optimizer's step hook."""
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
        """A profiler the script starts (torch.profiler, emit_nvtx, emit_itt, the
        legacy profiler) stops this one first (on its thread), and this one starts
        again when the script's stops. Neither step raises into the script: what
        fails is said in the trace's warnings."""
        from torch.autograd import profiler_legacy

        session = self._session
        assert session is not None
        paused = self._paused

        @self._guarded
        def pause() -> None:
            if session.running and threading.get_ident() == session.thread_id:
                self._hand_over(session.stop())
                self.writer.mark(CAPTURE_GAP)
                paused.set()

        @self._guarded
        def resume() -> None:
            if paused.is_set() and threading.get_ident() == self.lines.thread:
                paused.clear()
                if session.started:
                    session.start()
                else:  # (the script's ran from before the first call: the first start)
                    self.lines.first_call = None
                    self._start_profiler()
                self.writer.mark(CAPTURE_RESUMED)

        def wrap_start(original: Any) -> Any:
            def started(*args: Any, **kwargs: Any) -> Any:
                pause()
                return original(*args, **kwargs)

            return started

        def wrap_stop(original: Any) -> Any:
            def stopped(*args: Any, **kwargs: Any) -> Any:
                result = original(*args, **kwargs)
                resume()
                return result

            return stopped

        for module, starts, stop in (
            (
                torch.autograd.profiler,
                ("_prepare_profiler", "_enable_profiler"),
                "_disable_profiler",
            ),
            (profiler_legacy, ("_enable_profiler_legacy",), "_disable_profiler_legacy"),
        ):
            for name in starts:
                self._patches.replace(module, name, wrap_start(getattr(module, name)))
            self._patches.replace(module, stop, wrap_stop(getattr(module, stop)))
