"""PyTorch's CUDA caching allocator, modeled: the segments it would take from the
device for a run's allocations, and what free memory it would hold in pieces.

The rules, as c10/cuda/CUDACachingAllocator.cpp has them (one stream, default
settings unless given):
- a request is rounded to its block size (trace/cuda_blocks.py);
- requests up to 1 MiB come from the small pool, larger from the large pool;
- a block is the smallest free one of its pool that holds the request (of equal
  sizes, the lowest address);
- none: a new segment, 2 MiB for the small pool, 20 MiB for requests under
  10 MiB, else the request rounded up to 2 MiB;
- a block larger than asked is split where what is left is a block worth
  keeping: at least 512 bytes in the small pool, more than 1 MiB in the large
  one; else the whole block is handed out (and counted allocated);
- a freed block merges with free neighbours of its segment (never across
  segments);
- where a new segment does not fit the capacity, the allocator frees its
  segments that hold nothing and tries again, then fails: out of memory.
Not modeled: `expandable_segments` (a pool as one segment that grows by pages),
`max_split_size_mb`, streams other than the first, CUDA graphs' private pools.

Checked against PyTorch itself: replayed from the recorded snapshots
(tests/data/torch_cuda), the model's reserved bytes follow the segments PyTorch
took, and peak at its `max_memory_reserved()` (tests/unit/test_caching_allocator.py).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from tpumem.analysis.allocators.bfc_model import ReplayResult, replay_sizes
from tpumem.analysis.device_events import DeviceEvents
from tpumem.trace.cuda_blocks import MIN_BLOCK, block_sizes
from tpumem.trace.memory_settings import CUDA_CACHING
from tpumem.trace.metadata import TraceMetadata

SMALL_SIZE = 1 << 20  # kSmallSize: the small pool's largest request
SMALL_BUFFER = 2 << 20  # kSmallBuffer: a small pool's segment
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: below it a large segment is...
LARGE_BUFFER = 20 << 20  # kLargeBuffer: ...this large
ROUND_LARGE = 2 << 20  # kRoundLarge: larger segments round up to this


def segment_size(block: int) -> int:
    """The segment the allocator asks the device for, for a block it has no room
    for (get_allocation_size)."""
    if block <= SMALL_SIZE:
        return SMALL_BUFFER
    if block < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-block // ROUND_LARGE) * ROUND_LARGE


@dataclass(slots=True)
class _Block:
    address: int
    size: int
    segment: int
    large: bool  # of the large pool
    allocated: bool = False
    before: _Block | None = None  # the neighbours in its segment
    after: _Block | None = None


@dataclass(slots=True)
class _Pool:
    free: list[tuple[int, int]] = field(default_factory=list)  # (size, address), sorted
    blocks: dict[int, _Block] = field(default_factory=dict)  # free blocks by address


class OutOfMemory(Exception):
    def __init__(self, event: int, block: int, reserved: int) -> None:
        super().__init__(event, block, reserved)
        self.event, self.block, self.reserved = event, block, reserved


@dataclass(frozen=True, slots=True)
class Replay:
    """Per event: bytes allocated (blocks handed out), reserved (segments held),
    the largest free block; and where the run would fail (-1: it fits)."""

    allocated: np.ndarray
    reserved: np.ndarray
    largest_free: np.ndarray
    failed_at: int
    segments: tuple[int, ...]  # the sizes of the segments taken from the device, in order


class CachingAllocator:
    """The allocator's state; `malloc` and `free` as PyTorch's, on one stream."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = capacity
        self.pools = (_Pool(), _Pool())  # small, large
        self.reserved = 0
        self.allocated = 0
        self.segments: dict[int, tuple[int, int]] = {}  # id -> (address, size)
        self.taken: list[int] = []  # each segment's size, as it was taken
        self._next_address = 1 << 32

    def malloc(self, requested: int, event: int = -1, size: int | None = None) -> _Block:
        """A block for `requested` bytes (`size`: its block size, where known)."""
        if size is None:
            size = int(block_sizes(np.array([requested]))[0])
        pool = self.pools[size > SMALL_SIZE]
        block = self._best_fit(pool, size)
        if block is None:
            block = self._new_segment(pool, size, event)
        remaining = block.size - size
        if remaining >= MIN_BLOCK if size <= SMALL_SIZE else remaining > SMALL_SIZE:
            rest = _Block(
                block.address + size,
                remaining,
                block.segment,
                block.large,
                False,
                block,
                block.after,
            )
            if block.after is not None:
                block.after.before = rest
            block.after = rest
            block.size = size
            self._add_free(pool, rest)
        block.allocated = True
        self.allocated += block.size
        return block

    def free(self, block: _Block) -> None:
        block.allocated = False
        self.allocated -= block.size
        pool = self.pools[block.large]
        for neighbour in (block.before, block.after):
            if neighbour is not None and not neighbour.allocated:
                self._remove_free(pool, neighbour)
                if neighbour is block.before:
                    neighbour.size += block.size
                    neighbour.after = block.after
                    if block.after is not None:
                        block.after.before = neighbour
                    block = neighbour
                else:
                    block.size += neighbour.size
                    block.after = neighbour.after
                    if neighbour.after is not None:
                        neighbour.after.before = block
        self._add_free(pool, block)

    def largest_free(self) -> int:
        sizes = [pool.free[-1][0] for pool in self.pools if pool.free]
        return max(sizes, default=0)

    def _best_fit(self, pool: _Pool, size: int) -> _Block | None:
        at = bisect.bisect_left(pool.free, (size, -1))
        if at == len(pool.free):
            return None
        _, address = pool.free.pop(at)
        return pool.blocks.pop(address)

    def _add_free(self, pool: _Pool, block: _Block) -> None:
        bisect.insort(pool.free, (block.size, block.address))
        pool.blocks[block.address] = block

    def _remove_free(self, pool: _Pool, block: _Block) -> None:
        at = bisect.bisect_left(pool.free, (block.size, block.address))
        del pool.free[at]
        del pool.blocks[block.address]

    def _new_segment(self, pool: _Pool, size: int, event: int) -> _Block:
        grant = segment_size(size)
        if self.capacity is not None and self.reserved + grant > self.capacity:
            self._release_free_segments()
            if self.reserved + grant > self.capacity:
                raise OutOfMemory(event, size, self.reserved)
        segment = len(self.taken)
        self.taken.append(grant)
        address = self._next_address
        self._next_address += grant + (1 << 21)  # (segments are not neighbours)
        self.segments[segment] = (address, grant)
        self.reserved += grant
        return _Block(address, grant, segment, size > SMALL_SIZE)

    def _release_free_segments(self) -> None:
        """What a failed device allocation makes PyTorch do first: give back every
        segment that holds no allocated block (release_cached_blocks)."""
        for pool in self.pools:
            for size, address in list(pool.free):
                block = pool.blocks[address]
                whole = self.segments[block.segment]
                if block.before is None and block.after is None and whole[1] == size:
                    self._remove_free(pool, block)
                    del self.segments[block.segment]
                    self.reserved -= size


def replay(
    is_alloc: np.ndarray,
    requested: np.ndarray,
    buffer_id: np.ndarray,
    capacity: int | None = None,
) -> Replay:
    """The run's allocations and frees through the model. A free of a buffer the
    model never saw allocated (made before the capture) is skipped."""
    count = len(is_alloc)
    allocated = np.zeros(count, np.int64)
    reserved = np.zeros(count, np.int64)
    largest = np.zeros(count, np.int64)
    model = CachingAllocator(capacity)
    live: dict[int, _Block] = {}
    failed_at = -1
    sizes = block_sizes(requested).tolist()  # (rounded once: a call an event costs 5 us)
    for index in range(count):
        if is_alloc[index]:
            try:
                live[int(buffer_id[index])] = model.malloc(
                    int(requested[index]), index, sizes[index]
                )
            except OutOfMemory:
                failed_at = index
                break
        else:
            block = live.pop(int(buffer_id[index]), None)
            if block is not None:
                model.free(block)
        allocated[index] = model.allocated
        reserved[index] = model.reserved
        largest[index] = model.largest_free()
    if failed_at >= 0:
        allocated[failed_at:] = model.allocated
        reserved[failed_at:] = model.reserved
        largest[failed_at:] = model.largest_free()
    return Replay(allocated, reserved, largest, failed_at, tuple(model.taken))


SOURCE = "PyTorch caching allocator model"


def models(metadata: TraceMetadata) -> bool:
    """Whether this model is the run's allocator's: PyTorch on CUDA with the
    settings the model follows (the defaults: no expandable segments, no
    max_split_size, no garbage collection threshold, no rounding divisions)."""
    settings = {k: str(v).lower() for k, v in (metadata.allocator_settings or {}).items()}
    declared = metadata.memory_settings
    return (
        declared is not None
        and declared.allocator_model == CUDA_CACHING
        and metadata.backend == "gpu"
        and settings.get("expandable_segments", "false") == "false"
        and settings.get("max_split_size", "-1") in ("-1", str(2**64 - 1))
        and float(settings.get("garbage_collection_threshold", "0") or 0) == 0
        and settings.get("roundup_power2_divisions", "none") in ("none", "")
    )


def replay_result(events: DeviceEvents) -> ReplayResult:
    """A device's events through the model, as the analysis reads a model's
    replay: bytes in use, pool and largest free block after each event."""
    asked = replay_sizes(events.requested, events.bytes)
    return as_replay_result(events.is_alloc, asked, events.buffer_id)


def as_replay_result(
    is_alloc: np.ndarray, asked: np.ndarray, buffer_id: np.ndarray, capacity: int | None = None
) -> ReplayResult:
    """The replay in the BFC model's form: under a capacity, its arrays end with
    the event before the allocation that found no room (`failed_at`)."""
    result = replay(is_alloc, asked, buffer_id, capacity)
    end = result.failed_at if result.failed_at >= 0 else len(is_alloc)
    blocks = block_sizes(asked)
    return ReplayResult(
        in_use=result.allocated[:end],
        pool=result.reserved[:end],
        largest_free=result.largest_free[:end],
        address=np.full(end, -1, np.int64),
        change=np.where(is_alloc, blocks, -blocks)[:end],
        failed_at=result.failed_at if result.failed_at >= 0 else None,
        source=SOURCE,
    )
