"""A PyTorch memory snapshot written as a tpumem trace: its allocations and frees,
its pool, what was live before its first entry, and its out-of-memory entries.

- An `alloc` is an allocation of the block the caching allocator gives for the
  size asked (trace/cuda_blocks.py); `free_completed` ends it (the block can be
  used again from then: replayed so, the recorded snapshots give PyTorch's own
  `max_memory_allocated()`). `free_requested` is not a row.
- The pool is what the segments hold: their sizes at the snapshot's end, less
  what the trace's segment entries added and took (`segment_alloc`/`free`,
  `segment_map`/`unmap` with expandable segments), one sample at each change.
- What was live before the first entry: frees of allocations the trace does not
  hold, and blocks allocated at the end that it never allocated. The history is
  a ring buffer (`max_entries`) that says nothing when it wraps, so the trace
  says how many and how large, and places them at its start (one microsecond
  before the first entry) with the stacks the snapshot gives them.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import pyarrow as pa

from tpumem.snapshots.walker import ACTION, EntryRows, SnapshotWalk
from tpumem.trace.cuda_blocks import block_sizes, divisions_by_interval
from tpumem.trace.memory_settings import NO_POOL, MemorySettings
from tpumem.trace.metadata import IMPORTED, AllocatorOom, metadata_json
from tpumem.trace.schema import ALLOC, ALLOCATOR, BEFORE_TRACE, FREE, META, STACK
from tpumem.trace.source_paths import first_user_location
from tpumem.trace.stack_rows import stack_text
from tpumem.trace.values import MAX_ADDRESS, MAX_BYTES
from tpumem.trace.writer import TraceWriter
from tpumem.units import format_bytes

ALLOCATOR_NAME = "CUDACachingAllocator"
_POOL_UP = (ACTION["segment_alloc"], ACTION["segment_map"])
_POOL_DOWN = (ACTION["segment_free"], ACTION["segment_unmap"])
# torch.profiler's conversion (_memory_viz._profile_to_snapshot) names a frame
# "file(line): function" and leaves its filename "none".
_PROFILER_FRAME = re.compile(r"(?P<file>.+)\((?P<line>\d+)\): (?P<function>.+)")
_LEAD_US = 1  # the trace starts this long before the first entry: what was live before
_LIVE_STATES = ("active_allocated", "active_pending_free")


@dataclass
class _Device:
    name: str
    pool_change: int = 0  # what the trace's segment entries added, net
    pool_rows: list[tuple[int, int]] = field(default_factory=list)  # (time_ns, change)
    pool_start: int = 0  # what the segments held before the first entry (at the end)
    orphans: list[tuple[int, int, int, int]] = field(default_factory=list)  # addr, size, stack, row


@dataclass
class Converted:
    entries: int
    allocations: int
    before: int  # allocations live before the first entry
    before_bytes: int
    ooms: int


class _Stacks:
    """Stack rows, one per distinct frames list the snapshot refers to."""

    def __init__(self, walk: SnapshotWalk) -> None:
        self._walk = walk
        self._ids: dict[int, int] = {}  # the walker's stack id -> the trace's (-1: none)
        self.sources: list[str | None] = []  # by stack id: the user's file:line
        self.pending: list[tuple[int, str]] = []  # stack rows to write

    def ids(self, frames: np.ndarray) -> np.ndarray:
        """The trace's stack ids (-1: none) for the rows' stacks, as the walker named them."""
        unique, inverse = np.unique(frames, return_inverse=True)
        mapped = np.array([self._stack(int(f)) for f in unique.tolist()], np.int64)
        return mapped[inverse.ravel()]

    def _stack(self, frames_id: int) -> int:
        if frames_id < 0:
            return -1
        if frames_id not in self._ids:
            self._ids[frames_id] = self.new(self._walk.frames(frames_id))
        return self._ids[frames_id]

    def new(self, snapshot_frames: Any) -> int:
        """A stack row for frames as the snapshot holds them; -1 for none."""
        frames = _frames_of(snapshot_frames)
        if not frames:
            return -1
        stack_id = len(self.sources)
        self.sources.append(first_user_location((file, line) for file, line, _ in frames))
        self.pending.append((stack_id, stack_text(frames[::-1])))
        return stack_id


def _frames_of(frames: Any) -> list[tuple[str, int, str]]:
    """A snapshot's frames (innermost first) as (file, line, function): Python's
    only (C++ frames, which `stacks="all"` adds, name no line of the user's)."""
    result: list[tuple[str, int, str]] = []
    if not isinstance(frames, list):
        return result
    for frame in frames:
        if not isinstance(frame, dict):
            continue
        file, line, name = frame.get("filename"), frame.get("line"), frame.get("name")
        if not isinstance(name, str) or not isinstance(file, str):
            continue
        if file == "none":
            match = _PROFILER_FRAME.fullmatch(name)
            if match is None:
                continue
            file, line, name = match["file"], int(match["line"]), match["function"]
        if not isinstance(line, int) or isinstance(line, bool):
            continue
        if file.endswith(".py") or file.startswith("<"):
            result.append((file, line, name))
    return result


def device_name(index: int, timed: bool) -> str:
    # torch.profiler's conversion (untimed) holds the host's memory too, in its
    # last list: its lists are not all GPUs.
    return f"GPU:{index}" if timed else f"device:{index}"


def write_snapshot(
    path: Path,
    writer_for: Callable[[dict[str, Any]], TraceWriter],
    on_progress: Callable[[int], None] | None = None,
) -> Converted:
    """Reads the snapshot at `path` and writes its trace through the writer
    `writer_for(metadata)` makes (after the first piece was read: a file that is
    no snapshot leaves none behind). Read a second time, and written again from
    the start, where the first reading learned too late what the writing needed:
    another device's history starting before the first's, or request rounding
    set (roundup_power2_divisions, whose setting comes after the entries)."""
    with SnapshotWalk(path, on_progress) as walk:
        try:
            return _Conversion(path, walk).run(writer_for)
        except _Again as again:
            learned = again
    with SnapshotWalk(path, on_progress) as walk:
        return _Conversion(path, walk, learned.start_us, learned.divisions).run(writer_for)


class _Again(Exception):
    def __init__(self, start_us: int | None, divisions: np.ndarray | None) -> None:
        self.start_us, self.divisions = start_us, divisions


class _Conversion:
    def __init__(
        self,
        path: Path,
        walk: SnapshotWalk,
        start_us: int | None = None,
        divisions: np.ndarray | None = None,
    ) -> None:
        self.path = path
        self.walk = walk
        self.stacks = _Stacks(walk)
        self.devices: dict[int, _Device] = {}
        self.writer: TraceWriter | None = None
        self.start_us = start_us
        self.earliest_us: int | None = None  # of every device's entries
        self.divisions = divisions
        self.timed = True
        self.entries = self.allocations = 0
        self.ooms: list[AllocatorOom] = []

    def run(self, writer_for: Callable[[dict[str, Any]], TraceWriter]) -> Converted:
        rows = self.walk.rows()
        first = next(rows, None)
        if first is not None:
            self._clock(first)
        self.writer = writer_for(
            {
                "framework": "pytorch",
                # (torch.profiler's conversion, untimed, is mostly the host's memory)
                "backend": "gpu" if self.timed else "cpu",
                "source": IMPORTED,
                "imported_from": str(self.path),
                "run": self.path.stem,
                "start_time_ns": (self.start_us or 0) * 1000 if self.timed else 0,
            }
        )
        with self.writer as writer:
            for piece in itertools.chain([first] if first is not None else [], rows):
                self._piece(piece)
            self._check_learned()
            before, before_bytes = self._before(writer)
            self._pool(writer)
            self._finish(writer, before, before_bytes)
        return Converted(self.entries, self.allocations, before, before_bytes, len(self.ooms))

    def _clock(self, first: EntryRows) -> None:
        known = first.time_us[first.time_us >= 0]
        self.timed = bool(len(known))
        if self.start_us is None:  # (the first device's first entry, until told)
            self.start_us = int(known[0]) - _LEAD_US if len(known) else 0

    def _check_learned(self) -> None:
        """Raises _Again where the trace written so far is not the snapshot's."""
        settings = self.walk.rest.get("allocator_settings")
        setting = (
            settings.get("roundup_power2_divisions") if isinstance(settings, Mapping) else None
        )
        divisions = divisions_by_interval(setting)
        early = (
            self.timed
            and self.earliest_us is not None
            and self.earliest_us - _LEAD_US < (self.start_us or 0)
        )
        rounded_otherwise = divisions.any() and self.divisions is None
        if early or rounded_otherwise:
            start = self.earliest_us - _LEAD_US if early and self.earliest_us else self.start_us
            raise _Again(start, divisions if divisions.any() else None)

    def _device(self, index: int) -> _Device:
        if index not in self.devices:
            self.devices[index] = _Device(device_name(index, self.timed))
        return self.devices[index]

    def _times(self, piece: EntryRows) -> np.ndarray:
        start = self.start_us or 0
        if not self.timed:  # (no times: a microsecond apart, in their order)
            return (np.arange(len(piece), dtype=np.int64) + piece.first_row + _LEAD_US) * 1000
        return (np.maximum(piece.time_us, start) - start) * 1000

    def _piece(self, piece: EntryRows) -> None:
        assert self.writer is not None
        self.entries += len(piece)
        known = piece.time_us[piece.time_us >= 0]
        if len(known):
            least = int(known.min())
            self.earliest_us = least if self.earliest_us is None else min(self.earliest_us, least)
        time_ns = self._times(piece)
        action = piece.action
        is_alloc = action == ACTION["alloc"]
        is_free = action == ACTION["free_completed"]
        orphan = is_free & (piece.buffer < 0)
        # A free of an allocation made before the first entry names itself: its
        # allocation is written at the end (_before), with the same id.
        buffer = np.where(orphan, np.arange(len(piece)) + piece.first_row, piece.buffer)
        stacks = self.stacks.ids(piece.frames)
        # (torch.profiler's conversion holds the sizes asked for, of memory no CUDA
        # allocator rounded: the host's, mostly)
        size = block_sizes(piece.size, self.divisions) if self.timed else piece.size
        for code in np.unique(piece.device).tolist():
            device = self._device(code)
            on = piece.device == code
            pool = on & np.isin(action, (*_POOL_UP, *_POOL_DOWN))
            if pool.any():
                up = np.isin(action[pool], _POOL_UP)
                change = np.where(up, piece.size[pool], -piece.size[pool])
                device.pool_rows.extend(zip(time_ns[pool].tolist(), change.tolist(), strict=True))
                device.pool_change += int(change.sum())
            mine = on & orphan
            device.orphans.extend(
                zip(
                    piece.addr[mine].tolist(),
                    size[mine].tolist(),
                    stacks[mine].tolist(),
                    buffer[mine].tolist(),
                    strict=True,
                )
            )
            for index in np.flatnonzero(on & (action == ACTION["oom"])).tolist():
                self.ooms.append(
                    AllocatorOom(
                        device=device.name,
                        time_ns=int(time_ns[index]),
                        requested_bytes=int(piece.size[index]),
                        device_free_bytes=int(piece.addr[index]),
                        stack=int(stacks[index]) if stacks[index] >= 0 else None,
                    )
                )
        self.allocations += int(is_alloc.sum())
        self._write_stacks()
        # (an entry without an address or a size is no allocation a device made)
        rows = np.flatnonzero((is_alloc | is_free) & (piece.addr >= 0) & (piece.size >= 0))
        if not len(rows):
            return
        stack = stacks[rows]
        sources = self.stacks.sources
        names = [device_name(i, self.timed) for i in range(int(piece.device.max()) + 1)]
        self.writer.write_columns(
            {
                "kind": pa.DictionaryArray.from_arrays(
                    pa.array(np.where(is_alloc[rows], 0, 1).astype(np.int8)),
                    pa.array([ALLOC, FREE]),
                ),
                "time_ns": time_ns[rows],
                "device": pa.DictionaryArray.from_arrays(
                    pa.array(piece.device[rows]), pa.array(names)
                ),
                "allocator": [ALLOCATOR_NAME] * len(rows),
                "buffer_id": buffer[rows],
                "address": piece.addr[rows],
                "bytes": size[rows],
                "requested_bytes": np.ma.MaskedArray(piece.size[rows], mask=~is_alloc[rows]),
                "region": self._regions(piece.category[rows]),
                "source": [sources[s] if s >= 0 else None for s in stack.tolist()],
                "stack": np.ma.MaskedArray(stack, mask=stack < 0),
            },
            len(rows),
        )

    def _regions(self, codes: np.ndarray) -> Any:
        """torch.profiler's categories (parameter, activation, gradient...), where
        the snapshot has them."""
        categories = self.walk.categories
        if not categories or (codes < 0).all():
            return None
        return pa.DictionaryArray.from_arrays(
            pa.array(codes.astype(np.int32), mask=codes < 0), pa.array(list(categories))
        )

    def _write_stacks(self) -> None:
        assert self.writer is not None
        for stack_id, text in self.stacks.pending:
            self.writer.record(STACK, time_ns=0, stack=stack_id, text=text)
        self.stacks.pending.clear()

    def _before(self, writer: TraceWriter) -> tuple[int, int]:
        """Writes the allocations live before the first entry: those the trace
        frees, and the blocks allocated at the end that it never allocated."""
        count = total = 0
        for device in self.devices.values():
            for address, size, stack, buffer_id in device.orphans:
                self._place(writer, device.name, buffer_id, address, size, None, stack)
                count, total = count + 1, total + size
        live = set(self.walk.live()[0].tolist())
        next_id = self.entries
        for segment in _segments(self.walk.rest, self.timed):
            device = self._device(segment["device"])
            for block in segment.get("blocks", ()):
                # (a block freed but awaiting its streams is live until free_completed,
                # as the trace counts it)
                if not isinstance(block, dict) or block.get("state") not in _LIVE_STATES:
                    continue
                addr, block_size = block.get("address"), block.get("size")
                if not (_in(addr, MAX_ADDRESS) and _in(block_size, MAX_BYTES)) or addr in live:
                    continue
                stack = self.stacks.new(block.get("frames"))
                self._write_stacks()
                requested = block.get("requested_size")
                self._place(writer, device.name, next_id, addr, block_size, requested, stack)
                next_id, count, total = next_id + 1, count + 1, total + block_size
        return count, total

    def _place(
        self,
        writer: TraceWriter,
        device: str,
        buffer_id: int,
        addr: int,
        size: int,
        requested: object,
        stack: int,
    ) -> None:
        writer.alloc(
            time_ns=0,
            device=device,
            allocator=ALLOCATOR_NAME,
            buffer_id=buffer_id,
            address=addr,
            bytes=size,
            requested_bytes=requested if isinstance(requested, int) else None,
            stack=stack if stack >= 0 else None,
            source=self.stacks.sources[stack] if stack >= 0 else None,
            region=BEFORE_TRACE,
        )

    def _with_pool(self, oom: AllocatorOom) -> AllocatorOom:
        """The failure with what the allocator held then: its last pool change
        at or before it (the failure comes after the entries of its time)."""
        device = next(d for d in self.devices.values() if d.name == oom.device)
        pool = device.pool_start
        for time_ns, change in device.pool_rows:
            if oom.time_ns is not None and time_ns > oom.time_ns:
                break
            pool += change
        return dataclasses.replace(oom, pool_bytes=pool)

    def _pool(self, writer: TraceWriter) -> None:
        """The pool: the segments' sizes at the end, less what the trace's segment
        entries changed, then each change."""
        if not self.timed:
            return
        held: dict[int, int] = {}
        for segment in _segments(self.walk.rest, self.timed):
            size = segment.get("total_size")
            if _in(size, MAX_BYTES):
                held[segment["device"]] = held.get(segment["device"], 0) + size
        for index in sorted(set(held) | set(self.devices)):
            device = self._device(index)
            pool = device.pool_start = held.get(index, 0) - device.pool_change
            writer.sample(time_ns=0, device=device.name, allocator=ALLOCATOR_NAME, pool_bytes=pool)
            for time_ns, change in device.pool_rows:
                pool += change
                writer.sample(
                    time_ns=time_ns, device=device.name, allocator=ALLOCATOR_NAME, pool_bytes=pool
                )

    def _finish(self, writer: TraceWriter, before: int, before_bytes: int) -> None:
        settings = self.walk.rest.get("allocator_settings")
        settings = settings if isinstance(settings, Mapping) else {}
        warnings = []
        if before:
            warnings.append(
                f"{before:,} allocations ({format_bytes(before_bytes)}) were live before the "
                "snapshot's first entry: its history (a ring buffer of max_entries) had dropped "
                "them, or recording began after they were made. They are placed at the "
                "trace's start; a peak before the first entry is not in it"
            )
        if not self.allocations:
            warnings.append(
                "the snapshot holds no history (recorded without "
                "torch.cuda.memory._record_memory_history, or with enabled='state'): its "
                "figures are the allocator's state when it was taken, not the run's peak"
            )
        if not self.timed and self.entries:
            warnings.append(
                "the snapshot's entries carry no times (torch.profiler's conversion): they are "
                "placed a microsecond apart, in their order; its last list is the host's "
                "memory, it has no pool, and its lines are where each function begins"
            )
        fields: dict[str, Any] = {
            "fidelity": {d.name: ALLOCATOR for d in self.devices.values()},
            "allocator_settings": _flat_settings(settings),
            "warnings": tuple(warnings),
        }
        if not self.timed:
            # No pool to model: the PyTorch caching allocator's model is for the
            # snapshots CUDA's allocator recorded, with their segments.
            fields["memory_settings"] = MemorySettings(allocator_model=NO_POOL)
        if self.ooms:
            fields["allocator_ooms"] = tuple(self._with_pool(oom) for oom in self.ooms)
        # (at the trace's start: a patch carries no time of its own that matters,
        # and the writer's clock is this import's, not the snapshot's)
        writer.record(META, time_ns=0, text=json.dumps(metadata_json(fields)))


def _in(value: object, most: int) -> TypeGuard[int]:
    """An integer of the range a trace holds (trace/values.py): a snapshot's
    value outside it is no device's, and is left out as the trace would."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most


def _segments(rest: Mapping[str, Any], timed: bool = True) -> list[dict[str, Any]]:
    """The snapshot's segments; none of torch.profiler's conversion (untimed),
    whose one segment a device spans the addresses it saw: no pool."""
    segments = rest.get("segments") if timed else None
    if not isinstance(segments, list):
        return []
    return [s for s in segments if isinstance(s, dict) and isinstance(s.get("device"), int)]


def _flat_settings(settings: Mapping[str, Any]) -> dict[str, str | int | float | None]:
    flat: dict[str, str | int | float | None] = {}
    for key, value in settings.items():
        if not isinstance(key, str):
            continue
        if isinstance(value, Mapping):
            nonzero = {k: v for k, v in value.items() if v}
            flat[key] = ",".join(f"{k}:{v}" for k, v in nonzero.items()) or None
        elif isinstance(value, bool):
            flat[key] = "true" if value else "false"
        elif isinstance(value, (str, int, float)) or value is None:
            flat[key] = value
    return flat
