"""The device buffers that jax.Array objects hold, from creation to release.

JAX's CPU client has no allocator that reports anything, so the JAX adapter keeps
its own book of buffers: every array a hooked call returns is entered here, one
buffer per shard, with its device, address (`unsafe_buffer_pointer`), size on the
device, shape, dtype, op and where it was made (source line, call stack). A
buffer is released when the last array holding it dies (a weakref callback), is
donated to a program, or is deleted. Several arrays can share one buffer
(`addressable_data`, `device_put` to the device it is already on): buffers are
counted by (device, address).

Weakref callbacks can fire anywhere, even inside the trace writer while it holds
its lock (a garbage collection that frees an array), so they only append to a
deque; the book is updated under its own lock by the calls that enter arrays and
by the poll that looks for arrays no hook saw.
"""

from __future__ import annotations

import collections
import math
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

from tpumem.adapters.book_rows import FOUND, NO_LABELS, TEMP, rows_to_columns, shape_text
from tpumem.adapters.call_stacks import NOWHERE, Where
from tpumem.trace.schema import ALLOC, FREE


def device_name(device: Any) -> str:
    """CpuDevice(id=3) -> 'CPU:3'; the same form TensorFlow's devices take. By the
    device's number on its host: in a distributed run, a process's GPU 0 is GPU:0,
    as the profiler names it in the allocator's events, whatever its global id."""
    local = getattr(device, "local_hardware_id", None)
    return f"{device.platform.upper()}:{device.id if local is None else local}"


@dataclass(slots=True)
class _Buffer:
    buffer_id: int
    bytes: int
    holders: int  # arrays that hold it
    device: str
    address: int


# An array in the book: (its weakref, its buffers, id(array), when it was entered).
# id(array) is kept because a new array may take it once this one died; the
# entry's sequence number tells the poll which entries are older than its look.
# A tuple: entering runs after every call, and a class's __init__ is a Python call.
_Entry = tuple[weakref.ref, list[_Buffer], int, int]


@dataclass(slots=True)
class BookCounts:
    """How the book learned of its buffers, for the trace's metadata."""

    entered: int = 0  # arrays entered by a hook
    found_by_poll: int = 0  # arrays the poll found that no hook had entered
    shared: int = 0  # arrays whose buffer another array already held
    donated: int = 0  # arrays whose buffers a program took over
    deleted: int = 0  # arrays deleted while still referenced (found by the poll)
    # Per-device array objects read to find buffers (see _enter): at most this
    # many more arrays in jax.live_arrays() than without tpumem.
    shards_listed: int = 0


class BufferBook:
    """Buffers of live arrays and the alloc/free rows they make.

    Entering runs after every hooked call, so it reads only what is cheap on an
    array (its aval, sharding, address, size on the device) and caches the rest
    by aval and by sharding object."""

    def __init__(self, start_time_ns: int, array_type: type) -> None:
        self.start_time_ns = start_time_ns
        self.array_type = array_type
        self.counts = BookCounts()
        self._clock = time.time_ns
        self._lock = threading.Lock()
        self._released: collections.deque[tuple[int, int]] = collections.deque()
        # id(weakref) -> the entry of an array in the book.
        self._entries: dict[int, _Entry] = {}
        self._by_object: dict[int, int] = {}  # id(array) -> id(its weakref)
        self._buffers: dict[tuple[str, int], _Buffer] = {}
        # Rows in _FIELDS order, in the order things happened: a free and an
        # allocation at the same moment (a donated buffer reused) keep their order.
        self._rows: list[tuple[Any, ...]] = []
        self._next_id = 0
        self._sequence = 0  # entries made so far: the poll leaves newer ones alone
        self._unseen: set[int] = set()  # ids the last poll found untracked
        # id(sharding) -> (the sharding, kept so its id stays its own; device name)
        self._devices: dict[int, tuple[Any, str]] = {}
        self._labels: dict[Any, tuple[str, str, int]] = {}  # aval -> dtype, shape, nbytes

    # -- entering and releasing ------------------------------------------------

    def enter(
        self,
        arrays: list[Any],
        time_ns: int,
        op: str | None,
        region: str,
        where: Where,
    ) -> None:
        """Enters the jax.Arrays among `arrays` (anything else is skipped)."""
        array_type = self.array_type
        with self._lock:
            if self._released:
                self._drain_released()
            entered = 0
            for array in arrays:
                if type(array) is not array_type:
                    array = getattr(array, "_base_array", None)  # typed PRNG keys
                    if type(array) is not array_type:
                        continue
                entered += self._enter(array, time_ns, op, region, where)
            self.counts.entered += entered

    def _enter(self, array: Any, time_ns: int, op: str | None, region: str, where: Where) -> bool:
        # The hot path of the adapter: locals, no helper calls for the usual case.
        key = id(array)
        by_object = self._by_object
        if key in by_object or array.is_deleted():
            return False  # in the book already (a dead array's id is dropped first)
        buffers = self._buffers
        source, stack = where
        aval = array.aval
        dtype, shape, nbytes = self._labels.get(aval) or self._label(aval)
        held = []
        # One array object per device, which JAX makes on first use and keeps with
        # the array: the only way to a buffer's address (unsafe_buffer_pointer and
        # on_device_size_in_bytes go through it too). They hold no memory of their
        # own, but jax.live_arrays() lists them: counted, and said in the report.
        shards = array._arrays
        self.counts.shards_listed += len(shards)
        for shard in shards:
            known = self._devices.get(id(shard.sharding))
            device = known[1] if known is not None else self._device(shard)
            address = shard.unsafe_buffer_pointer()
            buffer = buffers.get((device, address))
            if buffer is not None:
                buffer.holders += 1
                self.counts.shared += 1
            else:
                if shard is not array:
                    _, shape, nbytes = self._labels.get(shard.aval) or self._label(shard.aval)
                size = shard.on_device_size_in_bytes()
                buffer_id = self._next_id
                self._next_id = buffer_id + 1
                buffer = buffers[(device, address)] = _Buffer(buffer_id, size, 1, device, address)
                row = (ALLOC, time_ns, device, buffer_id, address, size, nbytes)
                self._rows.append((*row, op, region, dtype, shape, source, stack))
            held.append(buffer)
        ref = weakref.ref(array, self._on_death)
        self._entries[id(ref)] = (ref, held, key, self._sequence)
        by_object[key] = id(ref)
        self._sequence += 1
        return True

    def _on_death(self, ref: weakref.ref) -> None:
        # Arrays die until the interpreter's very end, after modules are torn
        # down: the clock is the instance's own.
        self._released.append((id(ref), self._clock() - self.start_time_ns))

    def release_deleted(self, arrays: list[Any], time_ns: int) -> None:
        """Releases the buffers of the arrays among `arrays` that were deleted:
        a program that took them as donated arguments."""
        array_type = self.array_type
        with self._lock:
            self._drain_released()
            for array in arrays:
                if type(array) is array_type and array.is_deleted():
                    ref_id = self._by_object.get(id(array))
                    if ref_id is not None and self._release(ref_id, time_ns):
                        self.counts.donated += 1

    def _release(self, ref_id: int, time_ns: int) -> bool:
        entry = self._entries.pop(ref_id, None)
        if entry is None:
            return False  # released before (donated or deleted), then died
        _, held, array_key, _ = entry
        if self._by_object.get(array_key) == ref_id:
            del self._by_object[array_key]
        for buffer in held:
            buffer.holders -= 1
            if buffer.holders == 0:
                device, address = buffer.device, buffer.address
                del self._buffers[(device, address)]
                row = (FREE, time_ns, device, buffer.buffer_id, address, buffer.bytes)
                self._rows.append(row + NO_LABELS)
        return True

    def _drain_released(self) -> None:
        """Releases the arrays that died since the last call, in order."""
        released = self._released
        while released:
            self._release(*released.popleft())

    # -- the poll --------------------------------------------------------------

    def poll(self, live_arrays: Any, calls_running: bool = False) -> None:
        """Compares the book with the arrays JAX says are alive: arrays entered
        before the call that are no longer alive were deleted; arrays alive but
        unknown twice in a row (a hook had time to enter them) are entered.
        While a hooked call runs, its donated arguments are deleted but not yet
        released by the hook (which knows when the program took them): the
        poll leaves deletions alone then."""
        with self._lock:
            sequence = -1 if calls_running else self._sequence
        live = live_arrays()
        now = time.time_ns() - self.start_time_ns
        with self._lock:
            self._drain_released()
            alive = {id(array) for array in live}
            for key, ref_id in list(self._by_object.items()):
                entered = self._entries[ref_id][3]
                if entered < sequence and key not in alive and self._release(ref_id, now):
                    self.counts.deleted += 1
            unseen = set()
            for array in live:
                key = id(array)
                if key in self._by_object:
                    continue
                if key in self._unseen and self._enter(array, now, None, FOUND, NOWHERE):
                    self.counts.found_by_poll += 1
                else:
                    unseen.add(key)
            self._unseen = unseen

    # -- rows ------------------------------------------------------------------

    def add_temp(
        self, device: str, size: int, start_ns: int, end_ns: int, op: str, where: Where
    ) -> None:
        """A buffer made outside any array: a program's temp, live while it ran.
        `requested_bytes` is the size: what XLA's buffer assignment asks for."""
        with self._lock:
            buffer_id = self._next_id
            self._next_id += 1
            self._rows.append(
                (ALLOC, start_ns, device, buffer_id, None, size, size, op, TEMP, None, None, *where)
            )
            self._rows.append((FREE, end_ns, device, buffer_id, None, size, *NO_LABELS))

    def take_columns(self) -> tuple[dict[str, list[Any]], int]:
        """The rows made since the last call, as trace columns."""
        with self._lock:
            self._drain_released()
            rows, self._rows = self._rows, []
        return rows_to_columns(rows)

    # -- labels, cached --------------------------------------------------------

    def _device(self, shard: Any) -> str:
        """A shard's device name, cached by its sharding object."""
        sharding = shard.sharding
        if len(self._devices) > 100_000:  # programs made and dropped by the thousand
            self._devices.clear()
        name = device_name(sharding._device_assignment[0])
        self._devices[id(sharding)] = (sharding, name)
        return name

    def _label(self, aval: Any) -> tuple[str, str, int]:
        """An aval's labels the first time it is seen: (dtype, shape, bytes)."""
        shape, dtype = aval.shape, aval.dtype
        size = dtype.itemsize * math.prod(shape)
        label = self._labels[aval] = (str(dtype), shape_text(shape), size)
        return label
