"""The device buffers that materialized PyTorch/XLA tensors hold.

PyTorch/XLA is lazy: an op on XLA tensors adds to a graph and returns a tensor
that holds no device memory. A tensor holds a device buffer (a `PjRtData`) only
once it is materialized: by a transfer from the host, which happens at once, or
by a graph execution (`torch_xla.sync()`, or reading a value), which gives every
live pending tensor a new buffer. So the book learns of tensors as the ops make
or use them (`seen`), and looks at what is materialized around each execution
(`prepare` before it, `settle` after it):

- a tensor materialized when the book first looks was transferred: its buffer
  is born when the op made it (region "input");
- a tensor that a graph materialized gets its buffer when the graph starts
  (region "output"); an in-place updated tensor gets a new buffer there too,
  and its old one, donated to the graph (PyTorch/XLA aliases in-place updated
  inputs with outputs), is freed at the same instant;
- a tensor's buffer is freed when the tensor dies, unless a pending graph still
  reads it: then at that graph's end;
- a graph's temp (XLA's intermediate buffers) is live from its launch until it
  ends (graph_ends.py).

Buffers are told apart by their data handle (PyTorch/XLA's `_get_tensors_handle`):
tensors that share one (`.data`, `detach()`) count it once. Parameters and
gradients keep those names as their region across steps.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tpumem.adapters.book_rows import (
    GRADIENT,
    INPUT,
    OUTPUT,
    PARAMETER,
    TEMP,
    BookRows,
    shape_text,
)
from tpumem.adapters.call_stacks import NOWHERE, Where
from tpumem.adapters.torch_xla.shard_bytes import device_bytes


@dataclass(slots=True)
class _Buffer:
    buffer_id: int
    bytes: int
    holders: int
    device: str
    handle: int  # its data handle at the last look (-1: not read yet)
    # Of the tensors that hold it (aliases share one): the look during which an
    # op last read one, and _Seen.saved.
    read: int = -1
    saved: int = -1


@dataclass(slots=True)
class _Tensor:
    """A materialized tensor in the book."""

    ref: weakref.ref
    buffer: _Buffer
    op: str | None
    region: str
    where: Where
    dtype: str
    shape: str
    nbytes: int
    device: str
    key: int  # id(tensor), which a new tensor may take once it died


@dataclass(slots=True)
class _Seen:
    """A tensor an op made or used, not yet looked at."""

    ref: weakref.ref
    time_ns: int
    op: str | None
    where: Any  # as the op captured it (op_stacks.py): a Where once entered
    # How many autograd runs had begun when an op autograd recorded made or
    # read it (autograd may keep its buffer for the next run); -1: none did.
    saved: int = -1
    region: str | None = None  # what the op that made it says it is for


@dataclass(slots=True)
class Execution:
    """One graph execution, from its launch until its outputs are ready."""

    start_ns: int
    frees: list[_Buffer] = field(default_factory=list)  # freed when it ends
    temp: _Buffer | None = None
    device: str | None = None  # where it runs: its first output's device
    # No later than the next run's start on its device (the device runs one at a
    # time): GraphEnds' word of its end can come after that run has started.
    latest_end_ns: int | None = None


@dataclass(slots=True)
class BookCounts:
    seen: int = 0  # tensors ops made or used, looked at
    sharded: int = 0  # under SPMD, tensors entered with a sharding (their shard's bytes)
    transferred: int = 0  # materialized when first looked at
    materialized: int = 0  # given a buffer by a graph
    replaced: int = 0  # buffers replaced by a graph (in-place updates)
    gradients: int = 0  # found as a parameter's .grad
    freed_after_graph: int = 0  # dead tensors whose buffer a graph still read
    executions: int = 0  # graph executions observed


@dataclass(slots=True)
class _Pending:
    """What `prepare` found, for `settle`."""

    tensors: list[tuple[Any, _Seen, str]]  # not yet materialized: tensor, labels, region
    updated: list[_Tensor]  # in the book, pending: updated in place
    frees: list[_Buffer]  # buffers of dead tensors that the graph reads


class TensorBook:
    def __init__(
        self,
        start_time_ns: int,
        xlac: Any,
        device_names: Any,
        donation: bool,
        places: Callable[[list[Any]], list[Where]],
        spmd: Callable[[], bool] = lambda: False,
    ) -> None:
        self.start_time_ns = start_time_ns
        self._clock = time.time_ns
        self._spmd = spmd  # whether executions are SPMD's (torch_xla.runtime.is_spmd)
        self._no_handle = -1  # the last handle given to data that holds no buffer
        self._places = places  # the Where of the stacks the ops captured
        self.counts = BookCounts()
        self._xlac = xlac
        self._device_names = device_names  # torch.device -> 'CPU:0'
        self._donation = donation  # in-place updated inputs are aliased (donated)
        self._lock = threading.Lock()
        self._seen: list[_Seen] = []
        # id(tensor) -> what was seen of it, for tensors seen since the last look.
        # Ids of dead tensors are reused at once, so a hit counts only if the
        # weakref still gives the same tensor.
        self._seen_refs: dict[int, _Seen] = {}
        self._tensors: dict[int, _Tensor] = {}  # id(weakref) -> tensor
        self._by_object: dict[int, int] = {}  # id(tensor) -> id(weakref)
        self._deaths: collections.deque[tuple[int, int]] = collections.deque()
        # Buffers of dead tensors: the buffer, when it died, whether an op read
        # it since the last look, and its `saved`.
        self._orphans: list[tuple[_Buffer, int, bool, int]] = []
        self._looks = 0
        self._autograd_runs = 0
        self._first_run_since_look: int | None = None  # (its number)
        self._graphs_kept = False  # a run kept its graph for another
        self._ended: collections.deque[tuple[Execution, int]] = collections.deque()
        self._running: dict[int, Execution] = {}  # id(run) -> run, until it ends
        self._launching = 0  # graphs between `prepare` and `settle`, on any thread
        self._rows = BookRows()
        self._next_id = 0
        self._grad_where: Where = NOWHERE

    # -- what the ops show -----------------------------------------------------

    def seen(
        self,
        made: list | None,
        used: list | None,
        time_ns: int,
        op: str | None,
        where: Where,
        recorded: bool,
        region: str | None = None,
    ) -> None:
        """The tensors an op made and those it used that are not in the book or
        seen yet (the hot path: no framework calls). `recorded`: autograd
        recorded the op; `region`: what the op's made tensors are for, where
        the op says (an optimizer's step: its state)."""
        refs, seen = self._seen_refs, self._seen
        saved = self._autograd_runs if recorded else -1
        for tensors, label, kind in ((made, op, region), (used, None, None)):
            for tensor in tensors or ():
                key = id(tensor)
                item = refs.get(key)
                if item is not None and item.ref() is tensor:
                    if recorded:
                        item.saved = saved
                    continue
                item = refs[key] = _Seen(weakref.ref(tensor), time_ns, label, where, saved, kind)
                seen.append(item)

    def knows(self, tensor: Any) -> bool:
        """Whether the tensor is in the book or seen since the last look."""
        item = self._seen_refs.get(id(tensor))
        return (item is not None and item.ref() is tensor) or self._entry(tensor) is not None

    def reads(self, tensor: Any, recorded: bool) -> bool:
        """`knows`, for a tensor an op reads (`recorded`: an op autograd
        recorded), which is marked so."""
        item = self._seen_refs.get(id(tensor))
        if item is not None and item.ref() is tensor:
            if recorded:
                item.saved = self._autograd_runs
            return True
        entry = self._entry(tensor)
        if entry is None:
            return False
        entry.buffer.read = self._looks
        if recorded:
            entry.buffer.saved = self._autograd_runs
        return True

    def autograd_runs(self, where: Where, keeps_graph: bool) -> None:
        """Backward (or autograd.grad) is about to run, called from `where`;
        `keeps_graph`: it may keep its graph (and what it saved) for another."""
        self._grad_where = where
        self._autograd_runs += 1
        if self._first_run_since_look is None:
            self._first_run_since_look = self._autograd_runs
        self._graphs_kept |= keeps_graph

    # -- around an execution ---------------------------------------------------

    def prepare(self, now_ns: int) -> _Pending:
        """Before a graph runs: enters transferred tensors, finds the pending
        ones, and settles the buffers of tensors that died since the last look.

        Under SPMD a tensor's data is a list of shards that the runtime's thread
        fills in once the graph that made it has run: until then the list is
        empty, and PyTorch/XLA reads a handle, or a graph's inputs, from its
        first shard (the process died with SIGSEGV: pytorch/xla's FSDPv2
        example at every profiled run), or while that thread moves the shards
        in. So under SPMD the look first waits for the runs launched so far, as
        `torch_xla.sync(wait=True)` would: the graph about to launch was traced
        meanwhile, and the device idles only for the launch."""
        if self._spmd():
            with contextlib.suppress(RuntimeError):  # the runtime failed: the call says so
                self._xlac._xla_wait_device_ops([])  # lets the GIL go while it waits
        with self._lock:
            self._drain_deaths()
            updated, by_handle = self._look_at_tracked(now_ns)
            seen, self._seen = self._seen, []
            self._seen_refs = {}
            candidates = []
            for item in seen:
                tensor = item.ref()
                if tensor is None or self._entry(tensor) is not None:
                    continue
                if tensor.device.type == "xla":
                    candidates.append((tensor, item))
            params = [t for t, _ in candidates if _is_parameter(t)]
            grads = self._grads(now_ns, params)
            grad_ids = {id(grad) for grad, _ in grads}
            candidates = [(t, i) for t, i in candidates if id(t) not in grad_ids] + grads
            self.counts.gradients += len(grads)
            self.counts.seen += len(candidates)
            pending: list[tuple[Any, _Seen, str]] = []
            if candidates:
                needs = self.pending_flags([t for t, _ in candidates])
                ready = []
                for (tensor, item), needed in zip(candidates, needs, strict=True):
                    region = _region(tensor, item)
                    if needed:
                        pending.append((tensor, item, region))
                    else:
                        ready.append((tensor, item, INPUT if region == OUTPUT else region))
                self._enter(ready, None, by_handle)
                self.counts.transferred += len(ready)
            roots = [t for t, _ in updated] + [t for t, _, _ in pending]
            frees = self._settle_orphans(roots)
            self._launching += 1  # until `settle`, or `abandon` where it does not come
            return _Pending(pending, [entry for _, entry in updated], frees)

    def settle(
        self, pending: _Pending, start_ns: int, graph: str | None, temp_bytes: int, where: Where
    ) -> tuple[Execution, Any]:
        """After a graph was launched: new buffers for the tensors it
        materialized and for those it updated in place (the tensors that were
        pending before it), and its temporaries, made where it was run
        (`where`). Returns the run, which `end` closes, and one tensor the graph
        gave a buffer (None if it gave none)."""
        run = Execution(start_ns, frees=pending.frees)
        with self._lock:
            self._launching -= 1
            self._drain_deaths()
            updated = [(t, e) for e in pending.updated if (t := e.ref()) is not None]
            tensors = [t for t, _ in updated] + [t for t, _, _ in pending.tensors]
            # A tensor still pending belongs to a graph on another device.
            needs = self.pending_flags(tensors)
            mine = [t for t, needed in zip(tensors, needs, strict=True) if not needed]
            if mine:
                # The runs before it on its device had ended by its start, whenever
                # their end is seen: closed first, before its outputs are entered.
                run.device = self._device(mine[0])
                self._end_before(run.device, start_ns)
            output = None
            # Python tensors that wrap one XLA tensor (PyTorch/XLA's aliases) were
            # updated together and share the new buffer.
            given: dict[int, _Buffer] = {}
            for (tensor, entry), needed in zip(updated, needs[: len(updated)], strict=True):
                if not needed:
                    xla_id = self._xlac._xla_get_tensor_id(tensor)
                    given[xla_id] = self._replace(entry, run, given.get(xla_id))
                    output = tensor
            new = [
                (tensor, item, region)
                for (tensor, item, region), needed in zip(
                    pending.tensors, needs[len(updated) :], strict=True
                )
                if not needed
            ]
            self._enter(new, start_ns, None)
            self.counts.materialized += len(new)
            if new:
                output = new[0][0]
            if temp_bytes > 0 and output is not None and run.device is not None:
                run.temp = self._alloc(
                    run.device, temp_bytes, start_ns, graph, TEMP, None, None, where
                )
            self.counts.executions += 1
            self._running[id(run)] = run
        return run, output

    def abandon(self) -> None:
        """The graph `prepare` looked at was not settled (its launch raised)."""
        with self._lock:
            self._launching -= 1

    def end(self, run: Execution, end_ns: int) -> None:
        """A run's outputs are ready (called on GraphEnds' thread)."""
        self._ended.append((run, end_ns))

    def close_running(self, end_ns: int) -> int:
        """Ends the runs whose end was never reported; how many there were."""
        with self._lock:
            self._drain_ended()
            left = list(self._running.values())
        for run in left:
            self.end(run, end_ns)
        return len(left)

    def finish(self, now_ns: int) -> None:
        """At the end: buffers of dead tensors that no graph read are freed."""
        with self._lock:
            self._drain_deaths()
            for buffer, time_ns, _, _ in self._orphans:
                self._free(buffer, time_ns)
            self._orphans = []

    def take_columns(self) -> tuple[dict[str, Any], int]:
        with self._lock:
            if not self._launching:
                # (While a graph is being launched, the end GraphEnds saw of the run
                # before it may be after the new run's start: `settle` decides.)
                self._drain_ended()
            rows = self._rows.take()
        return self._rows.columns(rows)

    # -- the book's own work (under its lock) -----------------------------------

    def _grads(self, now_ns: int, new_params: list[Any]) -> list[tuple[Any, _Seen]]:
        """Gradients of the parameters in the book, and of those entering it
        now (`new_params`), that it does not hold: made by autograd in C++,
        where no op hook runs."""
        params = [e.ref() for e in self._tensors.values() if e.region == PARAMETER]
        found = []
        for tensor in params + new_params:
            grad = tensor.grad if tensor is not None else None
            if grad is not None and self._entry(grad) is None:
                seen = _Seen(weakref.ref(grad), now_ns, "backward", self._grad_where)
                found.append((grad, seen))
        return found

    def _look_at_tracked(self, now_ns: int) -> tuple[list[tuple[Any, _Tensor]], dict[int, _Buffer]]:
        """The tensors in the book that are pending (updated in place since the
        last look), and the buffers of the others by their data handle, read now.

        A handle is only stable once the graph that made the buffer has finished
        (before, it is the placeholder's), so handles are read afresh at every
        look and never compared across looks. Two tensors found holding one
        buffer (an alias that was updated with its base) are merged."""
        tracked = [(t, e) for e in self._tensors.values() if (t := e.ref()) is not None]
        if not tracked:
            return [], {}
        needs = self.pending_flags([t for t, _ in tracked])
        updated = [pair for pair, needed in zip(tracked, needs, strict=True) if needed]
        ready = [pair for pair, needed in zip(tracked, needs, strict=True) if not needed]
        by_handle: dict[int, _Buffer] = {}
        handles = self.handles([t for t, _ in ready])
        for (_, entry), handle in zip(ready, handles, strict=True):
            held = by_handle.setdefault(handle, entry.buffer)
            entry.buffer.handle = handle
            if held is not entry.buffer:
                self._release(entry.buffer, now_ns)
                held.holders += 1
                held.read = max(held.read, entry.buffer.read)
                held.saved = max(held.saved, entry.buffer.saved)
                entry.buffer = held
        return updated, by_handle

    def _settle_orphans(self, roots: list[Any]) -> list[_Buffer]:
        """Buffers of tensors that died since the last look: freed at their death,
        or, when the graph about to run reads them, when it ends.

        Every graph ran at the last look, so the pending graph reads a dead
        tensor's buffer only if it was built since: by an op that read the
        tensor (the op hook saw it), or by autograd, which builds its graph in
        C++ where no hook runs, from what it kept of the ops it recorded (a
        tensor dies when the script drops it; autograd's copy keeps the buffer
        until the run that uses it). Only then is the graph walked for its
        inputs: about 1 ms a step of the transformer example, whose dead tensors
        are last step's gradients (read since by no op) and outputs (kept by
        autograd for last step's backward, which has run)."""
        orphans, self._orphans = self._orphans, []
        first, self._first_run_since_look = self._first_run_since_look, None
        self._looks += 1
        if not orphans:
            return []

        def may_be_read(read: bool, saved: int) -> bool:
            if read:
                return True
            if saved < 0 or first is None:
                return False
            return self._graphs_kept or saved + 1 >= first  # its run came since

        inputs: set[tuple[int, int]] = set()
        if roots and any(may_be_read(read, saved) for _, _, read, saved in orphans):
            inputs = self._graph_inputs(roots)
        kept = []
        for buffer, time_ns, _, _ in orphans:
            # A handle is the buffer's address, which a freed buffer's successor can
            # take at once: an input counts as the orphan only with the same size.
            if (buffer.handle, buffer.bytes) in inputs:
                kept.append(buffer)
            else:
                self._free(buffer, time_ns)
        self.counts.freed_after_graph += len(kept)
        return kept

    def pending_flags(self, tensors: list[Any]) -> list[bool]:
        """Whether each tensor waits for a graph to give it a buffer. A tensor
        between states on another device's thread (no data and no IR yet:
        torch_xla's check fails for it, for the whole list) counts as pending,
        as one whose graph has not run: the look must not fail the program's op."""
        if not tensors:
            return []
        check = self._xlac._check_tensor_need_materialization
        try:
            return list(check(tensors))
        except RuntimeError:
            flags = []
            for tensor in tensors:
                try:
                    flags.append(bool(check([tensor])[0]))
                except RuntimeError:
                    flags.append(True)
            return flags

    def handles(self, tensors: list[Any]) -> list[int]:
        """The data handle of each materialized tensor (its buffer's address);
        data that holds no buffer (a placeholder, or a run that failed) gets a
        handle no buffer has."""
        placeholder = getattr(self._xlac, "_is_placecholder", None)  # (sic)
        if tensors and placeholder is not None and self._spmd():
            held = [not placeholder(tensor) for tensor in tensors]
            read = iter(self._read_handles([t for t, h in zip(tensors, held, strict=True) if h]))
            return [next(read) if h else self._none() for h in held]
        return self._read_handles(tensors)

    def _read_handles(self, tensors: list[Any]) -> list[int]:
        if not tensors:
            return []
        read = self._xlac._get_tensors_handle
        try:
            return list(read(tensors))
        except RuntimeError:  # a placeholder among them: its handle is refused
            handles = []
            for tensor in tensors:
                try:
                    handles.append(int(read([tensor])[0]))
                except RuntimeError:
                    handles.append(self._none())
            return handles

    def _none(self) -> int:
        self._no_handle -= 1
        return self._no_handle

    def _graph_inputs(self, roots: list[Any]) -> set[tuple[int, int]]:
        """(handle, bytes) of each buffer the pending graph of `roots` reads."""
        try:
            _, inputs = self._xlac._get_tensors_xla_device_data_node(roots)
        except RuntimeError:  # the graph's inputs unknown: free at death
            return set()
        inputs = list(inputs)
        handles = self.handles(inputs)
        sizes = [self._bytes(t) for t in inputs]
        return set(zip(handles, sizes, strict=True))

    def _enter(
        self,
        tensors: list[tuple[Any, _Seen, str]],
        time_ns: int | None,
        by_handle: dict[int, _Buffer] | None,
    ) -> None:
        """Enters materialized tensors: born at `time_ns`, or when the op made
        them. With `by_handle`, a tensor holding a buffer already in the book
        (`.data`, `detach()`) shares it."""
        if not tensors:
            return
        handles = (
            self.handles([t for t, _, _ in tensors])
            if by_handle is not None
            else [-1] * len(tensors)
        )
        places = self._places([item.where for _, item, _ in tensors])
        for (tensor, item, region), handle, where in zip(tensors, handles, places, strict=True):
            device = self._device(tensor)
            dtype, shape = str(tensor.dtype).removeprefix("torch."), shape_text(tensor.shape)
            nbytes = self._bytes(tensor)
            born = item.time_ns if time_ns is None else time_ns
            buffer = by_handle.get(handle) if by_handle is not None else None
            if buffer is None:
                labels = (item.op, region, dtype, shape, where)
                buffer = self._alloc(device, nbytes, born, *labels)
                buffer.handle = handle
                if by_handle is not None:
                    by_handle[handle] = buffer
            else:
                buffer.holders += 1
            buffer.saved = max(buffer.saved, item.saved)
            ref = weakref.ref(tensor, self._on_death)
            entry = _Tensor(
                ref,
                buffer,
                item.op,
                region,
                where,
                dtype,
                shape,
                nbytes,
                device,
                id(tensor),
            )
            self._tensors[id(ref)] = entry
            self._by_object[id(tensor)] = id(ref)

    def _release(self, buffer: _Buffer, time_ns: int | None) -> bool:
        """One holder less; True when it was the last. With a time, the free is
        written; without, the caller decides when it happens."""
        buffer.holders -= 1
        if buffer.holders:
            return False
        if time_ns is not None:
            self._free(buffer, time_ns)
        return True

    def _replace(self, entry: _Tensor, run: Execution, shared: _Buffer | None) -> _Buffer:
        """A tensor updated in place has a new buffer from the graph of `run`
        (`shared`: one an alias of it already got). PyTorch/XLA donates the old
        one to the graph when it can (same size, aliasing on): it is freed as
        the graph starts, else when it ends."""
        old = entry.buffer
        if self._release(old, None):
            if self._donation and old.bytes == entry.nbytes:
                self._free(old, run.start_ns)
            else:
                run.frees.append(old)
        if shared is not None:
            shared.holders += 1
            entry.buffer = shared
            return shared
        entry.buffer = self._alloc(
            entry.device,
            entry.nbytes,
            run.start_ns,
            entry.op,
            entry.region,
            entry.dtype,
            entry.shape,
            entry.where,
        )
        self.counts.replaced += 1
        return entry.buffer

    def _alloc(
        self,
        device: str,
        size: int,
        time_ns: int,
        op: str | None,
        region: str,
        dtype: str | None,
        shape: str | None,
        where: Where,
    ) -> _Buffer:
        buffer = _Buffer(self._next_id, size, 1, device, -1)
        self._next_id += 1
        self._rows.alloc(
            time_ns, device, buffer.buffer_id, None, size, size, (op, region, dtype, shape, where)
        )
        return buffer

    def _free(self, buffer: _Buffer, time_ns: int) -> None:
        self._rows.free(time_ns, buffer.device, buffer.buffer_id, None, buffer.bytes)

    def _on_death(self, ref: weakref.ref) -> None:
        # Only a deque append: this can run inside the book's lock (a GC). Tensors
        # die until the interpreter's very end, after modules are torn down (the
        # `time` module's global is None by then): the clock is held by the book.
        self._deaths.append((id(ref), self._clock() - self.start_time_ns))

    def _drain_deaths(self) -> None:
        deaths = self._deaths
        while deaths:
            ref_id, time_ns = deaths.popleft()
            entry = self._tensors.pop(ref_id, None)
            if entry is None:
                continue
            if self._release(entry.buffer, None):
                buffer = entry.buffer
                self._orphans.append((buffer, time_ns, buffer.read == self._looks, buffer.saved))
            if self._by_object.get(entry.key) == ref_id:
                del self._by_object[entry.key]

    def _end_before(self, device: str, start_ns: int) -> None:
        """A device runs one graph at a time, each after the one before it (it reads
        that one's outputs): runs on `device` whose end GraphEnds has not told yet
        had ended by the time this one starts. (Its word can come late: it waits
        for all the device's work, and for the GIL; under load, a step late.)
        Without this, two runs' temporaries, and the buffers the earlier one frees
        at its end, would overlap in the book as they never did on the device."""
        for run in list(self._running.values()):
            if run.device == device:
                run.latest_end_ns = start_ns
                self._ended.append((run, start_ns))
        self._drain_ended()

    def _drain_ended(self) -> None:
        ended = self._ended
        while ended:
            run, end_ns = ended.popleft()
            if self._running.pop(id(run), None) is None:
                continue
            if run.latest_end_ns is not None:
                end_ns = min(end_ns, run.latest_end_ns)
            for buffer in run.frees:
                self._free(buffer, end_ns)
            if run.temp is not None:
                self._free(run.temp, end_ns)

    def _entry(self, tensor: Any) -> _Tensor | None:
        """The tensor's entry in the book, if it is in it."""
        ref_id = self._by_object.get(id(tensor))
        entry = self._tensors.get(ref_id) if ref_id is not None else None
        return entry if entry is not None and entry.ref() is tensor else None

    def _device(self, tensor: Any) -> str:
        return self._device_names(tensor.device)

    def _bytes(self, tensor: Any) -> int:
        """The bytes a device holds of the tensor: under SPMD, device 0's shard."""
        whole = tensor.numel() * tensor.element_size()
        if not self._spmd():
            return whole
        try:
            spec = self._xlac._get_xla_sharding_spec(tensor)
        except Exception:  # a tensor without XLA data yet: its whole size
            return whole
        self.counts.sharded += bool(spec)
        return device_bytes(spec, tuple(tensor.shape), tensor.element_size())


def _is_parameter(tensor: Any) -> bool:
    return type(tensor).__name__ == "Parameter"


def _region(tensor: Any, item: _Seen) -> str:
    if _is_parameter(tensor):
        return PARAMETER
    if item.region is not None:
        return item.region
    if item.op == "backward":
        return GRADIENT
    return OUTPUT
