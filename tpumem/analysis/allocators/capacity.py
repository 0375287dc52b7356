"""Would the run fit in SIZE? Its allocations replayed, in the order and sizes the
trace recorded, through the BFC allocator model (bfc_model.py) with the pool
capped at SIZE, as TensorFlow's and XLA's BFC allocators do under a memory limit:
the first allocation that finds no free chunk and no room to grow the pool is
the out-of-memory the run would meet, told in the same form as a real one and
labeled modeled. Also the smallest capacity in which the model holds the run.

The replay is exact where the trace holds every allocation and free the allocator
saw, in order (a TensorFlow trace with one profiler session: tested against real
runs under limits). What it cannot know it says: buffers allocated before the
capture began are not in it, and a buffer whose free fell in a capture gap is
freed where the trace first shows it gone, the rule the peak uses (unseen_frees.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tpumem.analysis import provenance
from tpumem.analysis.allocators import caching_allocator
from tpumem.analysis.allocators.bfc import MIN_ALLOCATION, UNLIMITED, rounded_bytes
from tpumem.analysis.allocators.bfc_model import (
    ReplayResult,
    repeat_candidates,
    replay,
    replay_sizes,
)
from tpumem.analysis.allocators.caching_allocator import segment_size
from tpumem.analysis.device_events import DeviceEvents, pair_events, step_marks
from tpumem.analysis.oom import OutOfMemory, verdict
from tpumem.analysis.peak import live_at, live_groups, step_at
from tpumem.trace.cuda_blocks import block_sizes
from tpumem.trace.metadata import TraceMetadata
from tpumem.trace.model import Trace
from tpumem.units import format_bytes

GROWTH = "grown in regions as needed (allow_growth)"
PREALLOCATED = "one region of the whole capacity (preallocated)"
# PyTorch on CUDA: its caching allocator's model (caching_allocator.py).
SEGMENTS = "PyTorch's caching allocator, segments taken as needed"
MODEL_SOURCE = "the BFC allocator model"

# The smallest capacity is searched to within this share of it (and never finer
# than BFC's 256-byte unit): a replay per halving, so a few tens at most.
SEARCH_PRECISION = 0.001


@dataclass(frozen=True, slots=True)
class CapacityCheck:
    device: str
    capacity_bytes: int
    pool_growth: str  # GROWTH, PREALLOCATED or SEGMENTS: which model, and its pool
    failure: OutOfMemory | None  # the first allocation with no room, as a real OOM reads
    # Where it holds: capacity minus the most the model had in use (in BFC's
    # chunks, which round and may hand out more than asked), and when that was.
    headroom_bytes: int | None
    tightest_time_ns: int | None
    tightest_step: int | None
    # The smallest capacity in which the model holds the run (bisection); None
    # where even the unlimited replay does not.
    smallest_bytes: int | None
    # Frees the model could not place: of buffers allocated before the capture.
    unplaced_frees: int
    label: str = provenance.MODELED


def pool_growth(metadata: TraceMetadata) -> str:
    """How the run's allocator would take memory: all of it up front on a GPU,
    unless the run's settings turned that off (the settings its framework declared,
    in the trace's memory_settings); regions grown as needed elsewhere
    (TensorFlow's CPU BFC allocator grows; the model stands in for the others)."""
    if caching_allocator.models(metadata):
        return SEGMENTS
    if metadata.backend != "gpu":
        return GROWTH
    settings = {k: str(v).lower() for k, v in (metadata.env or {}).items()}
    settings |= {k: str(v).lower() for k, v in (metadata.allocator_settings or {}).items()}
    declared = metadata.memory_settings.growth_settings if metadata.memory_settings else ()
    grows = any(
        value in growth.values
        for growth in declared
        for name, value in settings.items()
        if (name.endswith(growth.name) if growth.name_ends else name == growth.name)
    )
    return GROWTH if grows else PREALLOCATED


@dataclass(frozen=True, slots=True)
class _Stream:
    """The allocations and frees the model replays: the device's events, and a
    free for each buffer whose free fell in a capture gap, at the gap's end."""

    is_alloc: np.ndarray
    sizes: np.ndarray
    buffer_id: np.ndarray
    origin: np.ndarray  # per entry, its event's index (a gap free: the event after it)
    starts: np.ndarray  # entries where steps (or quiet points) begin: repeats are copied
    unplaced_frees: int  # frees of buffers made before the capture: not in the stream


def _stream(trace: Trace, events: DeviceEvents) -> _Stream:
    sizes = replay_sizes(events.requested, events.bytes)
    index = np.arange(len(events))
    unpaired = pair_events(events.is_alloc, events.buffer_id) < 0
    # Frees the trace missed, placed by the rule in unseen_frees.py: just before
    # the event from which the buffer is gone, so before any new buffer that
    # takes its id or range.
    unseen = np.flatnonzero(events.is_alloc & unpaired & (events.ends() < len(events)))
    ends = events.ends()[unseen]
    order = np.argsort(np.concatenate([2 * index + 1, 2 * ends]), kind="stable")
    origin = np.concatenate([index, ends])[order]
    is_alloc = np.concatenate([events.is_alloc, np.zeros(len(ends), bool)])[order]
    steps = np.searchsorted(origin, np.searchsorted(events.time_ns, step_marks(trace)[0]))
    return _Stream(
        is_alloc=is_alloc,
        sizes=np.concatenate([sizes, sizes[unseen]])[order],
        buffer_id=np.concatenate([events.buffer_id, events.buffer_id[unseen]])[order],
        origin=origin,
        starts=repeat_candidates(steps, is_alloc),
        unplaced_frees=int((~events.is_alloc & unpaired).sum()),
    )


def _replay(stream: _Stream, capacity: int, growth: str) -> ReplayResult:
    if growth == SEGMENTS:
        limit = None if capacity >= UNLIMITED else capacity
        return caching_allocator.as_replay_result(
            stream.is_alloc, stream.sizes, stream.buffer_id, limit
        )
    return replay(
        stream.is_alloc,
        stream.sizes,
        stream.buffer_id,
        memory_limit=capacity,
        allow_growth=growth == GROWTH,
        step_starts=stream.starts,
    )


def check_capacity(trace: Trace, events: DeviceEvents, capacity: int) -> CapacityCheck:
    """The run on `events`' device replayed with its allocator capped at `capacity`."""
    growth = pool_growth(trace.metadata)
    stream = _stream(trace, events)
    result = _replay(stream, capacity, growth)
    failure = headroom = tightest_time = tightest_step = None
    if result.failed_at is not None:
        failure = _failure(trace, events, stream, result, capacity, growth)
    elif len(result.in_use):
        # (PyTorch's allocator is bound by its segments, not by what they hold)
        held = result.pool if growth == SEGMENTS else result.in_use
        tightest = int(np.argmax(held))
        headroom = capacity - int(held[tightest])
        tightest_time = int(events.time_ns[min(stream.origin[tightest], len(events) - 1)])
        tightest_step = step_at(trace, tightest_time)
    return CapacityCheck(
        device=events.device,
        capacity_bytes=capacity,
        pool_growth=growth,
        failure=failure,
        headroom_bytes=headroom,
        tightest_time_ns=tightest_time,
        tightest_step=tightest_step,
        smallest_bytes=_smallest(stream, growth),
        unplaced_frees=stream.unplaced_frees,
    )


def _failure(
    trace: Trace,
    events: DeviceEvents,
    stream: _Stream,
    result: ReplayResult,
    capacity: int,
    growth: str,
) -> OutOfMemory:
    """The allocation the model found no room for, in the form of a real failure:
    what it asked (rounded as BFC rounds), what was in use and free under the
    capacity, the largest free block (a free chunk, or the room left to grow)."""
    assert result.failed_at is not None
    index = int(stream.origin[result.failed_at])
    size = int(stream.sizes[result.failed_at])
    caching = growth == SEGMENTS
    asked = int(block_sizes(np.array([size]))[0]) if caching else rounded_bytes(size)
    before = len(result.in_use) - 1
    in_use = int(result.in_use[before]) if before >= 0 else 0
    pool = int(result.pool[before]) if before >= 0 else 0
    room = (capacity - pool) // MIN_ALLOCATION * MIN_ALLOCATION
    if caching and room < segment_size(asked):
        room = 0  # (PyTorch grows by whole segments: room short of one holds nothing)
    largest = max(int(result.largest_free[before]) if before >= 0 else 0, room)
    free = max(0, capacity - in_use)
    why, short = verdict(asked, free)
    (made,) = live_groups(trace, events, np.array([index]))
    live = live_at(events, index - 1) if index > 0 else np.zeros(0, np.int64)
    # Their chunks as the model handed them out: under a cap BFC may split what it
    # handed out whole in the run (or the other way round).
    placed = np.flatnonzero(stream.is_alloc[: result.failed_at])
    chunks = events.bytes.copy()
    chunks[stream.origin[placed]] = result.change[placed]
    groups = live_groups(trace, events, live, chunks)
    time_ns = int(events.time_ns[index])
    return OutOfMemory(
        phase="run",
        source=caching_allocator.SOURCE if caching else MODEL_SOURCE,
        message=(
            f"modeled: no free chunk of {format_bytes(asked)}, and no room to grow the pool "
            f"within {format_bytes(capacity)}"
        ),
        device=events.device,
        time_ns=time_ns,
        step=step_at(trace, time_ns),
        op=made.op,
        shape=made.shape,
        dtype=made.dtype,
        requested_bytes=asked,
        in_use_bytes=in_use,
        in_use_label=provenance.MODELED,
        limit_bytes=capacity,
        free_bytes=free,
        largest_free_block_bytes=largest,
        verdict=why,
        short_by_bytes=short,
        live=groups,
        location=made.source,
    )


def _live_floor(stream: _Stream) -> int:
    """No capacity below this holds the run: the most bytes live at once, each
    buffer rounded to BFC's unit (the model's chunks are never smaller)."""
    partner = pair_events(stream.is_alloc, stream.buffer_id)
    rounded = np.maximum(MIN_ALLOCATION, -(-stream.sizes // MIN_ALLOCATION) * MIN_ALLOCATION)
    made = np.where(stream.is_alloc & (stream.sizes > 0), rounded, 0)
    freed = np.where(~stream.is_alloc & (partner >= 0), made[np.maximum(partner, 0)], 0)
    return int(np.cumsum(made - freed).max(initial=0))


def _smallest(stream: _Stream, growth: str) -> int | None:
    """The smallest capacity in which the model holds the run, by bisection
    between the live floor (which fails below) and a capacity that holds. BFC's
    regions make holding not strictly monotone in the capacity, so this is the
    boundary the bisection finds; every answer it gives was replayed and held."""
    floor = _live_floor(stream)
    if floor == 0:
        return 0
    unlimited = _replay(stream, UNLIMITED, GROWTH)
    high = max(floor, int(unlimited.pool.max(initial=0)))
    for _ in range(8):  # one region of everything holds as soon as growth does
        if _replay(stream, high, growth).failed_at is None:
            break
        high *= 2
    else:
        return None
    low = floor - 1
    while high - low > max(MIN_ALLOCATION, int(high * SEARCH_PRECISION)):
        middle = (low + high) // 2 // MIN_ALLOCATION * MIN_ALLOCATION
        if middle <= low:
            break
        if _replay(stream, middle, growth).failed_at is None:
            high = middle
        else:
            low = middle
    return high
