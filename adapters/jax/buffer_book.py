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

from tpumem.adapters.book_rows import (
    ALLOC_CODE,
    FOUND,
    FREE_CODE,
    NONE,
    TOLD_CODE,
    BookRows,
    shape_text,
)
from tpumem.adapters.call_stacks import NOWHERE, Where


def device_name(device: Any) -> str:
    """CpuDevice(id=3) -> 'CPU:3'; the same form TensorFlow's devices take. By the
    device's number on its host: in a distributed run, a process's GPU 0 is GPU:0,
    as the profiler names it in the allocator's events, whatever its global id."""
    local = getattr(device, "local_hardware_id", None)
    return f"{device.platform.upper()}:{device.id if local is None else local}"


# A buffer in the book: [arrays that hold it, buffer id, bytes, device code
# (BookRows.device), address].
# A list, not a class: entering runs after every call, and a class's __init__ is
# a Python call (0.1 us of a call's few).
_Buffer = list
_HOLDERS = 0
# Polls in a row that leave new arrays to the hooked calls in flight (see poll).
HOLD_POLLS = 10

# An array in the book: (its weakref, its buffers, id(array), when it was entered).
# id(array) is kept because a new array may take it once this one died; the
# entry's sequence number tells the poll which entries are older than its look.
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

    def __init__(self, start_time_ns: int, array_type: type[Any]) -> None:
        self.start_time_ns = start_time_ns
        self.array_type = array_type
        self.counts = BookCounts()
        self._lock = threading.Lock()
        # (id(weakref), time.time_ns()) of the arrays that died, in order.
        self._released: collections.deque[tuple[int, int]] = collections.deque()
        released, clock = self._released.append, time.time_ns

        def on_death(ref: weakref.ref) -> None:
            # Arrays die until the interpreter's very end, after modules are torn
            # down: the clock is held here. A closure: no attribute lookups.
            released((id(ref), clock()))

        self._on_death = on_death
        # id(weakref) -> the entry of an array in the book.
        self._entries: dict[int, _Entry] = {}
        self._by_object: dict[int, int] = {}  # id(array) -> id(its weakref)
        self._buffers: dict[tuple[int, int], _Buffer] = {}  # by (device code, address)
        # Rows in the order things happened: a free and an allocation at the same
        # moment (a donated buffer reused) keep their order.
        self._rows = BookRows()
        self._next_id = 0
        self._sequence = 0  # entries made so far: the poll leaves newer ones alone
        self._unseen: set[int] = set()  # ids the last poll found untracked
        self._held_polls = 0  # polls in a row that left new arrays to a call in flight
        # id(sharding) -> (the sharding, kept so its id stays its own; its device's
        # code; the device's sizes, below)
        self._devices: dict[int, tuple[Any, int, dict | None]] = {}
        # A CPU device's sizes of a buffer by its aval, as the device first gave
        # them: on a CPU a layout has no tiles, so an aval's size is always the same
        # (0.9 us a fresh array to ask). Elsewhere (TPU tiles) each buffer is asked.
        self._sizes: dict[int, dict[Any, int] | None] = {}
        self._labels: dict[Any, tuple[str, str, int]] = {}  # aval -> dtype, shape, nbytes

    # -- entering and releasing ------------------------------------------------

    def enter(
        self,
        arrays: list[Any],
        time_ns: int,
        op: str | None,
        region: str,
        where: Where,
        regions: list[str] | None = None,
    ) -> None:
        """Enters the jax.Arrays among `arrays` (anything else is skipped);
        `regions`, where given, is each one's region in place of `region`."""
        array_type = self.array_type
        entered = listed = 0
        with self._lock:
            if self._released:
                self._drain_released()
            for index, array in enumerate(arrays):
                if type(array) is not array_type:
                    array = getattr(array, "_base_array", None)  # typed PRNG keys
                    if type(array) is not array_type:
                        continue
                if regions is not None:
                    region = regions[index]
                shards = self._enter(array, time_ns, op, region, where)
                if shards:
                    entered += 1
                    listed += shards
            counts = self.counts
            counts.entered += entered
            counts.shards_listed += listed

    def enter_one(
        self, array: Any, time_ns: int, op: str | None, region: str, where: Where
    ) -> None:
        """`enter` of one jax.Array: most calls return one, and the list costs."""
        with self._lock:
            if self._released:
                self._drain_released()
            shards = self._enter(array, time_ns, op, region, where)
            if shards:
                counts = self.counts
                counts.entered += 1
                counts.shards_listed += shards

    def _enter(self, array: Any, time_ns: int, op: str | None, region: str, where: Where) -> int:
        """Enters one array: the number of its shards, 0 if it was not entered.
        The hot path of the adapter: locals, no helper calls for the usual case."""
        key = id(array)
        by_object = self._by_object
        if key in by_object or array.is_deleted():
            return 0  # in the book already (a dead array's id is dropped first)
        buffers = self._buffers
        aval = array.aval
        dtype, shape, nbytes = self._labels.get(aval) or self._label(aval)
        held = []
        # One array object per device, which JAX makes on first use and keeps with
        # the array: the only way to a buffer's address (unsafe_buffer_pointer and
        # on_device_size_in_bytes go through it too). They hold no memory of their
        # own, but jax.live_arrays() lists them: counted, and said in the report.
        shards = array._arrays
        for shard in shards:
            _, device, sizes = self._devices.get(id(shard.sharding)) or self._device(shard)
            address = shard.unsafe_buffer_pointer()
            buffer = buffers.get((device, address))
            if buffer is not None:
                buffer[_HOLDERS] += 1
                self.counts.shared += 1
            else:
                shard_aval = aval
                if shard is not array:
                    shard_aval = shard.aval
                    _, shape, nbytes = self._labels.get(shard_aval) or self._label(shard_aval)
                size = sizes.get(shard_aval) if sizes is not None else None
                if size is None:
                    size = shard.on_device_size_in_bytes()
                    if sizes is not None:
                        sizes[shard_aval] = size
                buffer_id = self._next_id
                self._next_id = buffer_id + 1
                buffer = buffers[(device, address)] = [1, buffer_id, size, device, address]
                rows = self._rows  # (BookRows.alloc, inline: a call fewer)
                label = rows.labels.get((op, region, dtype, shape, where))
                if label is None:
                    label = rows.label((op, region, dtype, shape, where))
                rows.made.append(
                    (ALLOC_CODE, time_ns, device, buffer_id, address, size, nbytes, label)
                )
            held.append(buffer)
        ref = weakref.ref(array, self._on_death)
        ref_id = id(ref)
        self._entries[ref_id] = (ref, held, key, self._sequence)
        by_object[key] = ref_id
        self._sequence += 1
        return len(shards)

    def tell(self, arrays: list[Any], regions: list[str | None], time_ns: int) -> None:
        """What the arrays in the book among `arrays` are for, learned after they
        were entered (`regions`: each one's, None where nothing tells)."""
        array_type = self.array_type
        with self._lock:
            rows = self._rows
            for array, region in zip(arrays, regions, strict=True):
                if region is None or type(array) is not array_type:
                    continue
                ref_id = self._by_object.get(id(array))
                entry = self._entries.get(ref_id) if ref_id is not None else None
                if entry is None:
                    continue
                label = rows.label((None, region, None, None, NOWHERE))
                for _, buffer_id, size, device, _ in entry[1]:
                    rows.made.append(
                        (TOLD_CODE, time_ns, device, buffer_id, NONE, size, NONE, label)
                    )

    def buffer_ids(self, arrays: list[Any]) -> list[int]:
        """The ids of the buffers the book holds for `arrays` (their rows')."""
        with self._lock:
            found = []
            for array in arrays:
                ref_id = self._by_object.get(id(array))
                entry = self._entries.get(ref_id) if ref_id is not None else None
                if entry is not None:
                    found += [buffer[1] for buffer in entry[1]]
            return found

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
            buffer[_HOLDERS] -= 1
            if not buffer[_HOLDERS]:
                _, buffer_id, size, device, address = buffer
                del self._buffers[(device, address)]
                self._rows.made.append(  # (BookRows.free, inline: a call fewer)
                    (FREE_CODE, time_ns, device, buffer_id, address, size, NONE, NONE)
                )
        return True

    def _drain_released(self) -> None:
        """Releases the arrays that died since the last call, in order."""
        released, release, start = self._released, self._release, self.start_time_ns
        while released:
            ref_id, died = released.popleft()
            release(ref_id, died - start)

    # -- the poll --------------------------------------------------------------

    def hide_own_shards(self, live: list[Any]) -> list[Any]:
        """`live` (jax.live_arrays()'s list) less the per-device array objects that
        reading the entered arrays' buffers made JAX keep with them (_enter)."""
        own: set[int] = set()
        with self._lock:
            entered = self._by_object
            for array in live:
                if id(array) not in entered:
                    continue
                try:
                    shards = array._arrays
                except Exception:  # deleted meanwhile (donated on another thread)
                    continue
                own.update(id(shard) for shard in shards if shard is not array)
        return [array for array in live if id(array) not in own] if own else live

    def poll(self, live_arrays: Any, calls_running: bool = False, in_flight: bool = False) -> None:
        """Compares the book with the arrays JAX says are alive: arrays entered
        before the call that are no longer alive were deleted; arrays alive but
        unknown twice in a row (a hook had time to enter them) are entered.
        While a hooked call runs, its donated arguments are deleted but not yet
        released by the hook (which knows when the program took them): the
        poll leaves deletions alone then. While any hooked call is `in_flight`,
        the arrays it made are the hook's to enter, however long the call's
        thread waits for a core on a busy machine: the poll enters none, for at
        most HOLD_POLLS polls in a row (a thread that calls without pause)."""
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
            if in_flight and self._held_polls < HOLD_POLLS:
                self._held_polls += 1
                return
            self._held_polls = 0
            unseen = set()
            for array in live:
                key = id(array)
                if key in self._by_object:
                    continue
                shards = self._enter(array, now, None, FOUND, NOWHERE) if key in self._unseen else 0
                if shards:
                    self.counts.found_by_poll += 1
                    self.counts.shards_listed += shards
                else:
                    unseen.add(key)
            self._unseen = unseen

    # -- rows ------------------------------------------------------------------

    def add_window(
        self, device: str, size: int, window: tuple[int, int], op: str, region: str, where: Where
    ) -> None:
        """A buffer made outside any array the script holds, live for `window`
        (start, end): a program's temp while it ran (TEMP; `requested_bytes` is
        what XLA's buffer assignment asks for), or host data a call copied to the
        device for its run (INPUT: NumPy arguments)."""
        with self._lock:
            buffer_id = self._next_id
            self._next_id += 1
            self._rows.alloc(
                window[0], device, buffer_id, None, size, size, (op, region, None, None, where)
            )
            self._rows.free(window[1], device, buffer_id, None, size)

    def take_columns(self) -> tuple[dict[str, Any], int]:
        """The rows made since the last call, as trace columns."""
        with self._lock:
            self._drain_released()
            rows = self._rows.take()
        return self._rows.columns(rows)

    # -- labels, cached --------------------------------------------------------

    def _device(self, shard: Any) -> tuple[Any, int, dict | None]:
        """A shard's device (its code in the rows, its sizes), cached by its
        sharding object."""
        sharding = shard.sharding
        if len(self._devices) > 100_000:  # programs made and dropped by the thousand
            self._devices.clear()
        device = sharding._device_assignment[0]
        code = self._rows.device(device_name(device))
        if code not in self._sizes:
            self._sizes[code] = {} if device.platform == "cpu" else None
        known = self._devices[id(sharding)] = (sharding, code, self._sizes[code])
        return known

    def _label(self, aval: Any) -> tuple[str, str, int]:
        """An aval's labels the first time it is seen: (dtype, shape, bytes)."""
        shape, dtype = aval.shape, aval.dtype
        size = dtype.itemsize * math.prod(shape)
        label = self._labels[aval] = (str(dtype), shape_text(shape), size)
        return label
