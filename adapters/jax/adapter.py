"""The JAX adapter: buffer lifetimes on CPU and TPU, allocator events on GPU,
`memory_stats()` counters wherever the backend has them, and the memory analysis
of every compiled program.

- CPU: the client reports nothing about memory, so the adapter keeps a book of
  the buffers jax.Arrays hold (buffer_book.py, array_hooks.py). tpumem turns off
  the CPU client's asynchronous dispatch (unless the user set it): a
  single-device program then runs inside its call, so the call is its run
  window, and its temp buffer (XLA's buffer assignment) is shown live for it.
- GPU: the BFC allocator's MemoryAllocation/MemoryDeallocation events from
  profiler sessions run back to back (profiler_chunks.py), as for TensorFlow.
- TPU: `memory_stats()` samples and the buffer book (allocator events where the
  profiler has them).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from tpumem.adapters.base import (
    Adapter,
    CaptureOptions,
    Every,
    Patches,
    Sampler,
    mark_numbered_steps,
    on_step_annotation,
    register,
)
from tpumem.adapters.book_rows import WRITE_EVERY_S
from tpumem.adapters.call_stacks import CallStacks
from tpumem.adapters.interrupts import keep_interrupts
from tpumem.adapters.jax.array_hooks import JaxHooks
from tpumem.adapters.jax.buffer_book import BufferBook, device_name
from tpumem.adapters.jax.framework import FRAMEWORK
from tpumem.adapters.kept_arrays import kept_arrays
from tpumem.adapters.keras_steps import KerasSteps
from tpumem.adapters.process_identity import agreed_run_id
from tpumem.adapters.profiler_chunks import ProfilerChunks, newest_xspace
from tpumem.adapters.xla_dump import XlaDump, close_dump, install_dump, keep_dump_flags
from tpumem.trace.metadata import DeviceInfo, JaxBook, JaxExtra, ProcessInfo
from tpumem.trace.schema import ALLOCATOR, BUFFER
from tpumem.trace.writer import TraceWriter

ASYNC_DISPATCH_VARIABLE = "JAX_CPU_ENABLE_ASYNC_DISPATCH"
POLL_INTERVAL_S = 0.1  # how often the book is checked against jax.live_arrays()
# memory_stats() keys -> trace sample columns.
_STATS = {
    "bytes_in_use": "bytes_in_use",
    "peak_bytes_in_use": "peak_bytes_in_use",
    "bytes_limit": "bytes_limit",
    "bytes_reserved": "bytes_reserved",
    "pool_bytes": "pool_bytes",
    "largest_free_block_bytes": "largest_free_block",
}


class _JaxSessions:
    """JAX's profiler sessions. A session made while another one is still active
    is not refused when made but fails when stopped, so `open` refuses until the
    last session's `collect` has stopped it."""

    def __init__(self) -> None:
        from jax._src.lib import _profiler

        self._profiler = _profiler
        self._lock = threading.Lock()
        self._active = False

    def open(self) -> Any | None:
        with self._lock:
            if self._active:
                return None
            options = self._profiler.ProfileOptions()
            options.host_tracer_level = 2  # the allocators' TraceMe events
            options.python_tracer_level = 0  # on by default; costly, and not read
            options.enable_hlo_proto = False  # nor are the programs' HLO
            session = self._profiler.ProfilerSession(options)
            self._active = True
            return session

    def busy(self) -> bool:
        return self._active

    def collect(self, session: Any) -> bytes:
        try:
            return session.stop()
        except Exception:  # a session the profiler refused: it has no events
            return b""
        finally:
            with self._lock:
                self._active = False


@register
class JaxAdapter(Adapter):
    framework = FRAMEWORK

    def __init__(self, options: CaptureOptions) -> None:
        super().__init__(options)
        self._sampler: Sampler | None = None
        self._warnings: list[str] = []
        self._chunks: ProfilerChunks | None = None
        self._book: BufferBook | None = None
        self._hooks: JaxHooks | None = None
        self._dump: XlaDump | None = None
        self._ready = False  # the script has made JAX's backend
        self._live_arrays: Any = None  # JAX's own, where the script's hides tpumem's
        self._prepared = False
        self.devices: list[Any] = []
        self.counted: list[Any] = []

    @classmethod
    def environment(cls, options: CaptureOptions, current: Mapping[str, str]) -> dict[str, str]:
        # Run times of CPU programs are observed only when they run inline.
        if ASYNC_DISPATCH_VARIABLE not in current:
            return {ASYNC_DISPATCH_VARIABLE: "false"}
        return {}

    @classmethod
    def environment_read(cls) -> bool:
        # JAX reads its configuration variables when it is imported.
        return cls.module in sys.modules

    @classmethod
    def runtime_started(cls) -> bool:
        bridge = sys.modules.get("jax._src.xla_bridge")
        return bool(getattr(bridge, "_backends", None))

    def prepare(self, writer: TraceWriter) -> None:
        self.writer = writer
        # XLA reads XLA_FLAGS when JAX first makes a backend (below, unless the
        # script made one before tpumem started).
        self._dump = install_dump(self.options, self._warnings)
        stacks = CallStacks(writer, self.options.native_frames, self.options.stacks)
        self._hooks = JaxHooks(writer, None, False, stacks)
        keep_interrupts(self._hooks.patches)  # the book hears of deaths in callbacks
        self._already_imported = not self._hooks.install_before_import()
        self._prepared = True

    @property
    def hooks(self) -> JaxHooks:
        """The hooks prepare() made: every step after it runs with them."""
        assert self._hooks is not None
        return self._hooks

    def start(self, writer: TraceWriter) -> None:
        if not self._prepared:
            self.prepare(writer)
        hooks = self.hooks
        import jax

        writer.patch_metadata(framework_version=jax.__version__)
        mark = mark_numbered_steps(self.writer)

        def annotated(name: str, step: int | None) -> None:
            hooks.annotated = True  # the script marks its steps: none are guessed
            mark(name, step)

        hooks.patches.on_undo(on_step_annotation(jax.profiler.StepTraceAnnotation, annotated))
        hooks.keras = self._keras = KerasSteps(writer, hooks.patches)
        hooks.install_after_import()
        if self.runtime_started():
            from jax._src import xla_bridge

            self._backend_ready(xla_bridge.get_backend())
        else:
            self._await_backend()
        self._polls, self._book_writes = Every(POLL_INTERVAL_S), Every(WRITE_EVERY_S)
        self._sampler = Sampler("tpumem-jax", self.options.sample_interval_s, self._tick)
        self._sampler.start()

    def _await_backend(self) -> None:
        """The device work waits for the script to make JAX's backend: a backend
        made by tpumem would come before the script's jax.distributed.initialize()
        (which must come first) and before its platform and memory settings. JAX
        makes its backends in `xla_bridge.backends()`, which every device query,
        transfer and compile calls first: the work starts there, once, before that
        first call returns (other threads wait for it)."""
        from jax._src import xla_bridge

        original, adapter = xla_bridge.backends, self
        lock = threading.RLock()  # the work itself asks JAX for its devices

        @functools.wraps(original)
        def backends() -> Any:
            if not adapter._ready:
                adapter._keep_dump_flags()
            found = original()
            if adapter._ready or not found:
                return found
            with lock:
                if not adapter._ready:
                    adapter._ready = True
                    xla_bridge.backends = original
                    default = getattr(xla_bridge, "_default_backend", None)
                    adapter._backend_ready(default or next(iter(found.values())))
            return found

        self.hooks.patches.replace(xla_bridge, "backends", backends)

    def _keep_dump_flags(self) -> None:
        """The dump's flags back after the script's own XLA_FLAGS, where the
        script replaced them after `import jax` (xla_dump.keep_dump_flags)."""
        dump = self._dump
        if dump is None or not dump.owned:
            return
        theirs = keep_dump_flags(os.environ, dump.directory)
        if theirs is not None:
            self._warnings.append(
                f"the script set XLA_FLAGS itself ({theirs or 'empty'}); tpumem added its dump "
                "of XLA's plans after the script's flags (XLA reads them once)"
            )

    def _backend_ready(self, client: Any) -> None:
        """What needs the backend: which devices, the buffer book and its hooks, the
        profiler sessions on a GPU, which process of a distributed run this is.
        Read from the default backend's client itself: this runs inside JAX's own
        first look up of its backend, where jax.devices() and its kin would look
        it up again (a recursion newer JAX refuses)."""
        import jax
        from jaxlib import _jax

        self._ready = True
        hooks, writer = self.hooks, self.writer
        backend = client.platform
        devices = client.local_devices()  # (client.devices() holds every process's)
        self.devices = devices
        self.counted = [d for d in devices if _memory_stats(d) is not None]
        async_cpu = os.environ.get(ASYNC_DISPATCH_VARIABLE, "true").lower() not in ("0", "false")
        if backend != "gpu":
            self._book = BufferBook(writer.start_time_ns, _jax.ArrayImpl)
        hooks.book = self._book
        hooks.backend_made = True
        if self._book is not None:
            self._hide_own_shards(hooks.patches, self._book)
        hooks.temp_windows = backend == "cpu" and not async_cpu
        if self._already_imported and self._book is not None:
            # Functions jitted before now run in C++, past the hooks.
            hooks.install_every_call()
            self._warnings.append(
                "jax was in use before tpumem started: while it recorded, every jitted "
                "call took JAX's Python path (slower calls, the same arrays)"
            )
        fidelity = ALLOCATOR if backend == "gpu" else BUFFER
        writer.patch_metadata(
            backend=backend,
            devices=[
                DeviceInfo(device_name(d), d.device_kind, platform=d.platform) for d in devices
            ],
            fidelity={device_name(d): fidelity for d in devices},
        )
        count = len({d.process_index for d in client.devices()})
        self.identify(
            writer,
            ProcessInfo(client.process_index(), count, "jax.process_index()"),
            agreed_run_id(count, _agree),
        )
        if backend == "cpu" and async_cpu:
            self._warnings.append(
                f"{ASYNC_DISPATCH_VARIABLE} is on: programs run after their calls return, "
                "so their temp buffers are not shown (their sizes are in the programs list); "
                f"{ASYNC_DISPATCH_VARIABLE}=false in the environment before JAX starts shows them"
            )
        if backend != "cpu":
            self._chunks = ProfilerChunks(writer, _JaxSessions(), self.options.chunk_s)
            self._take_over_profiler_api(jax, self._chunks)
            self._chunks.start()

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
            self._warnings.extend(self._sampler.warnings())
        self._sample_once()
        if self._chunks is not None:
            self._chunks.stop()
            self._warnings.extend(self._chunks.warnings)
        if not self._ready:
            self._warnings.append(
                "the script never started JAX's backend (no device, no array): "
                "there was nothing on a device to record"
            )
        close_dump(self._dump, self.writer, bool(self.hooks.programs), self._warnings)
        if self._book is not None:
            self._write_kept(self._book)
            self._write_book(self._book)
            self.writer.patch_metadata(extra=JaxExtra(buffer_book=self._book_metadata(self._book)))
        self.writer.patch_metadata(allocator_settings=self._settings(), warnings=self._warnings)
        self.hooks.uninstall()

    def _write_kept(self, book: BufferBook) -> None:
        """The script's containers that still hold arrays (kept_arrays.py)."""
        main = sys.modules.get("__main__")
        array_type = book.array_type
        try:
            kept = kept_arrays(
                vars(main) if main is not None else {},
                getattr(main, "__file__", None),
                lambda value: type(value) is array_type,
                book.buffer_ids,
            )
        except Exception as error:  # (the script's objects: anything may raise)
            self._warnings.append(f"the script's containers of arrays were not read: {error!r}")
            return
        if kept:
            self.writer.patch_metadata(kept=kept)

    def forget(self) -> None:
        self.hooks.uninstall()

    def _book_metadata(self, book: BufferBook) -> JaxBook:
        counts, hooks = book.counts, self._hooks
        return JaxBook(
            method="jax.Array buffers, entered by hooks on jitted calls and device_put",
            arrays_entered=counts.entered,
            arrays_found_by_poll=counts.found_by_poll,
            arrays_sharing_a_buffer=counts.shared,
            arrays_donated=counts.donated,
            arrays_deleted=counts.deleted,
            shard_arrays_listed=counts.shards_listed,
            shard_arrays_hidden=self._live_arrays is not None,
            poll_interval_s=POLL_INTERVAL_S,
            jitted_functions_wrapped=hooks.wrapped if hooks else 0,
            program_temp_shown=bool(hooks and hooks.temp_windows),
        )

    def _hide_own_shards(self, patches: Patches, book: BufferBook) -> None:
        """jax.live_arrays() as the script would see it without tpumem: the
        per-device array objects the book made JAX keep are left out (a script
        that sizes itself by its live arrays sizes itself as it would have). The
        poll reads JAX's own."""
        import jax
        from jax._src import api

        original = api.live_arrays

        @functools.wraps(original)
        def live_arrays(*args: Any, **kwargs: Any) -> Any:
            return book.hide_own_shards(original(*args, **kwargs))

        self._live_arrays = original
        patches.replace(api, "live_arrays", live_arrays)
        if jax.live_arrays is original:
            patches.replace(jax, "live_arrays", live_arrays)

    def _tick(self) -> None:
        import jax

        self._sample_once()
        self._keras.watch()
        if self._book is not None:
            if self._polls.due():
                hooks = self.hooks
                live = self._live_arrays or jax.live_arrays
                self._book.poll(live, hooks.calls_running > 0, hooks.in_flight > 0)
            if self._book_writes.due():
                self._write_book(self._book)
        if self._dump is not None:
            self._dump.tick(self.writer)

    def _sample_once(self) -> None:
        for device in self.counted:
            stats = _memory_stats(device)
            if stats:
                fields = {column: stats[key] for key, column in _STATS.items() if key in stats}
                self.writer.sample(device=device_name(device), **fields)

    def _write_book(self, book: BufferBook) -> None:
        columns, count = book.take_columns()
        if count:
            self.writer.write_columns(columns, count)

    def _take_over_profiler_api(self, jax: Any, chunks: ProfilerChunks) -> None:
        """jax.profiler.start_trace/stop_trace would fail while tpumem's session
        runs: the script's own session replaces tpumem's for its span."""
        from jax._src import profiler

        original_start, original_stop = profiler.start_trace, profiler.stop_trace
        logdirs: list[str] = []

        def start_trace(log_dir: Any, *args: Any, **kwargs: Any) -> None:
            chunks.pause()
            try:
                original_start(log_dir, *args, **kwargs)
            except Exception:
                chunks.resume(None)
                raise
            logdirs.append(str(log_dir))

        def stop_trace() -> None:
            try:
                original_stop()
            finally:
                logdir = logdirs.pop() if logdirs else None
                chunks.resume(newest_xspace(logdir) if logdir else None)

        start_trace.__doc__, stop_trace.__doc__ = original_start.__doc__, original_stop.__doc__
        patches = self.hooks.patches
        for owner in (profiler, jax.profiler):
            patches.replace(owner, "start_trace", start_trace)
            patches.replace(owner, "stop_trace", stop_trace)

    def _settings(self) -> dict[str, Any]:
        """Each device's limit as JAX reports it; the variables that set it are in
        the metadata from the start (runner.py)."""
        settings: dict[str, Any] = {}
        for device in self.counted:
            stats = _memory_stats(device) or {}
            if "bytes_limit" in stats:
                settings[f"{device_name(device)} bytes_limit"] = stats["bytes_limit"]
        return settings


def _agree(key: str, mine: str) -> str | None:
    """The run id through JAX's coordination service (process_identity.agreed_run_id)."""
    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:
        return None
    with contextlib.suppress(Exception):  # another process set it first
        client.key_value_set(key, mine)
    try:
        return str(client.blocking_key_value_get(key, 10_000))
    except Exception:  # the service is gone: the run goes on without an id
        return None


def _memory_stats(device: Any) -> dict[str, int] | None:
    try:
        return device.memory_stats()
    except Exception:  # a backend without statistics
        return None
