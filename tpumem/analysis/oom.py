"""Out of memory: each allocation the run failed for want of memory, what it asked
for, what was in use and free, why it failed, and what was live at that moment.

Read from what the trace holds: the exception that ended the run (its text, as
the runner recorded it), the allocator's own log of each failure (`tpumem profile`
reads it from stderr), and the device's events up to the failure. The messages'
figures are the framework's own (measured); where a message leaves one out, the
events give it (bytes in use, the limit), labeled as those figures are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tpumem.analysis import provenance
from tpumem.analysis.allocators.caching_allocator import segment_size
from tpumem.analysis.device_events import DeviceEvents
from tpumem.analysis.oom_causes import OomCause, oom_causes
from tpumem.analysis.oom_messages import (
    CompiledAllocation,
    OomMessage,
    combine,
    parse_allocator_log,
    parse_exception,
)
from tpumem.analysis.peak import LiveGroup, live_at, live_groups, step_at
from tpumem.hlo.tiles import element_bits, parse_shape
from tpumem.trace.cuda_blocks import block_sizes
from tpumem.trace.model import Trace
from tpumem.trace.source_paths import first_user_location
from tpumem.trace.stack_rows import call_stacks
from tpumem.units import format_bytes

# Where a failure was told: these two by the exception that ended the run.
ENDED_BY_EXCEPTION = "the exception that ended the run"
ENDED_BY_EXCEPTION_AND_LOG = "the exception and the allocator's log"
NOT_ENOUGH = "not enough memory"
FRAGMENTED = "fragmentation"
COMPILE = "the compiled program does not fit"
# The device had room for the segment the allocator asked for, and still it
# failed: a limit of the framework's own refused it (PyTorch's memory fraction).
LIMIT = "a limit set for the allocator"


@dataclass(frozen=True, slots=True)
class OutOfMemory:
    phase: str  # "run", or "compile" (XLA:TPU's plan for the program did not fit)
    source: str  # what said it: the exception, the allocator's log, or both
    message: str  # the framework's own line
    device: str | None
    time_ns: int | None  # on the trace clock; None where the trace cannot place it
    step: int | None
    op: str | None
    shape: str | None
    dtype: str | None
    requested_bytes: int | None
    in_use_bytes: int | None
    in_use_label: str
    limit_bytes: int | None
    free_bytes: int | None  # limit - in use, or as the message says
    largest_free_block_bytes: int | None
    verdict: str | None  # NOT_ENOUGH, FRAGMENTED, COMPILE, or None (cannot tell)
    short_by_bytes: int | None  # with NOT_ENOUGH or COMPILE
    live: tuple[LiveGroup, ...]  # the captured buffers live at the failure, largest first
    compiled_largest: tuple[CompiledAllocation, ...] = ()
    location: str | None = None  # the source line that asked, where the trace knows it
    causes: tuple[OomCause, ...] = ()  # where the memory went, largest first (oom_causes.py)

    @property
    def live_bytes(self) -> int:
        return sum(group.bytes for group in self.live)

    @property
    def ended_the_run(self) -> bool:
        """Whether the run ended on this failure (its exception), not only met it
        (a failed allocation a script may catch and go on from)."""
        return self.source in (ENDED_BY_EXCEPTION, ENDED_BY_EXCEPTION_AND_LOG)


def _messages(trace: Trace) -> list[tuple[OomMessage, str, int | None]]:
    """(message, source, time on the trace clock) of each failure the trace holds.
    The exception that ended the run and the allocator's last log are one failure."""
    meta = trace.metadata
    start = meta.start_time_ns or 0
    logs = []
    for log in meta.allocator_oom_logs or ():
        parsed = parse_allocator_log(
            log.text, log.chunks_in_use_bytes, log.largest_free_chunk_bytes
        )
        if parsed is not None:
            at = log.wall_time_ns - start if log.wall_time_ns is not None else None
            logs.append((parsed, "the allocator's log", at))
    exception = parse_exception(meta.exit.exception or "") if meta.exit else None
    if exception is None:
        return logs
    if logs and exception.phase == "run":
        logged, _, at = logs.pop()
        return [*logs, (combine(exception, logged), ENDED_BY_EXCEPTION_AND_LOG, at)]
    return [*logs, (exception, ENDED_BY_EXCEPTION, None)]


# A process killed by SIGKILL whose memory came this close to what the machine
# allows may have been killed by the kernel's OOM killer (which tells no one).
NEAR_THE_LIMIT = 0.8
SIGKILL = 9
KILLED = "killed"  # the phase of a failure told by a kill, not by a message


def _killed(trace: Trace, devices: list[DeviceEvents]) -> OutOfMemory | None:
    """A run ended by SIGKILL with its memory near the machine's, or while the
    control group's OOM killer killed: "possibly the OOM killer", no more."""
    ending = trace.metadata.exit
    if ending is None or ending.signal != SIGKILL:
        return None
    rss, limit = ending.max_rss_bytes, ending.memory_limit_bytes
    near = rss is not None and limit is not None and rss >= NEAR_THE_LIMIT * limit
    if not near and not ending.oom_kills:
        return None
    said = []
    if rss is not None and limit is not None:
        said.append(f"its memory reached {format_bytes(rss)} of the {format_bytes(limit)} allowed")
    if ending.oom_kills:
        said.append("the control group's OOM killer killed during the run")
    # What the devices held when the capture last saw them (on a CPU backend the
    # device's memory is the process's).
    events = devices[0] if len(devices) == 1 else None
    live = live_at(events, len(events) - 1) if events is not None and len(events) else None
    groups = live_groups(trace, events, live) if events is not None and live is not None else ()
    return OutOfMemory(
        phase=KILLED,
        source="the exit status and the process's peak memory",
        message=f"killed by SIGKILL: possibly the OOM killer ({'; '.join(said)})",
        device=events.device if events is not None else None,
        time_ns=trace.metadata.end_time_ns,
        step=None,
        op=None,
        shape=None,
        dtype=None,
        requested_bytes=None,
        in_use_bytes=rss,
        in_use_label=provenance.MEASURED,
        limit_bytes=limit,
        free_bytes=None if rss is None or limit is None else max(0, limit - rss),
        largest_free_block_bytes=None,
        verdict=None,
        short_by_bytes=None,
        live=groups,
    )


def _device_of(message: OomMessage, devices: list[DeviceEvents]) -> DeviceEvents | None:
    if message.device is not None:
        return next((d for d in devices if d.device == message.device), None)
    if len(devices) == 1:
        return devices[0]
    return None


def out_of_memory(
    trace: Trace, devices: list[DeviceEvents], in_use_labels: dict[str, str]
) -> tuple[OutOfMemory, ...]:
    """Every out-of-memory failure in the trace, in the order they happened.
    `in_use_labels`: how each device's bytes in use were obtained."""
    found = []
    for message, source, at in _messages(trace):
        # A compile's failure is XLA's plan, not the device's state at a moment.
        events = _device_of(message, devices) if message.phase == "run" else None
        in_use, in_use_label = message.in_use_bytes, provenance.MEASURED
        limit, live, index, time_ns = message.limit_bytes, np.zeros(0, np.int64), None, at
        if events is not None and len(events):
            # The failure came after the last event the capture saw before it.
            index = len(events) - 1
            if at is not None:
                index = max(0, int(np.searchsorted(events.time_ns, at, side="right")) - 1)
            live = live_at(events, index)
            if in_use is None:
                in_use, in_use_label = int(events.in_use[index]), in_use_labels[events.device]
            limit = limit if limit is not None else events.bytes_limit
            time_ns = at if at is not None else int(events.time_ns[index])
        if in_use is None:
            in_use_label = provenance.NOT_AVAILABLE
        free = message.free_bytes
        if free is None and limit is not None and in_use is not None:
            free = max(0, limit - in_use)
        verdict, short = _why(message, free)
        groups = live_groups(trace, events, live) if events is not None else ()
        causes: tuple[OomCause, ...] = ()
        if events is not None and index is not None:
            whole = (limit, "the limit") if limit is not None else (in_use, "the bytes in use")
            # (Free as the message says it, measured; else the limit less what
            # was in use, known as that was.)
            free_how = provenance.MEASURED if message.free_bytes is not None else in_use_label
            largest = message.largest_free_block_bytes
            causes = oom_causes(trace, events, live, whole, (free, free_how), largest)
        found.append(
            OutOfMemory(
                phase=message.phase,
                source=source,
                message=message.text,
                device=events.device if events is not None else message.device,
                time_ns=time_ns,
                step=step_at(trace, time_ns) if time_ns is not None else None,
                op=message.op,
                shape=message.shape,
                dtype=message.dtype,
                requested_bytes=_requested(message),
                in_use_bytes=in_use,
                in_use_label=in_use_label,
                limit_bytes=limit,
                free_bytes=free,
                largest_free_block_bytes=message.largest_free_block_bytes,
                verdict=verdict,
                short_by_bytes=short,
                live=groups,
                compiled_largest=message.largest,
                causes=causes,
            )
        )
    found += _recorded(trace, devices, in_use_labels)
    found.sort(key=lambda failure: failure.time_ns if failure.time_ns is not None else -1)
    killed = _killed(trace, devices)
    return (*found, killed) if killed is not None else tuple(found)


def _recorded(
    trace: Trace, devices: list[DeviceEvents], in_use_labels: dict[str, str]
) -> list[OutOfMemory]:
    """The failures the allocator's own history holds (a PyTorch snapshot's `oom`
    entries): what was asked, what CUDA had free and what the allocator held. More
    free than asked means a limit refused it (set_per_process_memory_fraction,
    which no snapshot records) or no piece was large enough: the verdict is left
    open, the figures said."""
    found = []
    stacks, _ = call_stacks(trace)
    for oom in trace.metadata.allocator_ooms or ():
        events = next((d for d in devices if d.device == oom.device), None)
        # The failure came after the last event at or before its time (none: it
        # was the device's first allocation, with nothing in use).
        index = -1
        if events is not None and len(events) and oom.time_ns is not None:
            index = int(np.searchsorted(events.time_ns, oom.time_ns, side="right")) - 1
        in_use = int(events.in_use[index]) if events is not None and index >= 0 else 0
        asked = int(block_sizes(np.array([oom.requested_bytes or 0]))[0])
        cached = None if oom.pool_bytes is None else max(0, oom.pool_bytes - in_use)
        free = None
        if oom.device_free_bytes is not None and cached is not None:
            free = oom.device_free_bytes + cached
        said = [f"could not allocate {format_bytes(asked)} on {oom.device}"]
        if oom.device_free_bytes is not None:
            said.append(f"CUDA had {format_bytes(oom.device_free_bytes)} free")
        if cached is not None:
            said.append(f"the allocator held {format_bytes(cached)} unused")
        why, short = verdict(asked, free)
        if why == FRAGMENTED:  # (or a limit: the snapshot cannot tell which, unless...)
            why = None
            device_free = oom.device_free_bytes
            if device_free is not None and device_free >= segment_size(asked):
                why = LIMIT  # (...CUDA had room for the very segment it would take)
        stack = stacks.get(oom.stack) if oom.stack is not None else None
        live = live_at(events, index) if events is not None and index >= 0 else None
        found.append(
            OutOfMemory(
                phase="run",
                source="the allocator's history (the snapshot's oom entry)",
                message="; ".join(said),
                device=oom.device,
                time_ns=oom.time_ns,
                step=step_at(trace, oom.time_ns) if oom.time_ns is not None else None,
                op=None,
                shape=None,
                dtype=None,
                requested_bytes=oom.requested_bytes,
                in_use_bytes=in_use,
                in_use_label=in_use_labels.get(oom.device, provenance.DERIVED)
                if events is not None
                else provenance.NOT_AVAILABLE,
                limit_bytes=None,
                free_bytes=free,
                largest_free_block_bytes=None,
                verdict=why,
                short_by_bytes=short,
                live=live_groups(trace, events, live)
                if events is not None and live is not None
                else (),
                location=first_user_location((f.file, f.line) for f in reversed(stack))
                if stack
                else None,
            )
        )
    return found


def _requested(message: OomMessage) -> int | None:
    """The bytes asked for: the allocator's rounded size, the message's, or the
    tensor's own (TensorFlow names its shape and type, not its size)."""
    if message.rounded_bytes or message.requested_bytes:
        return message.rounded_bytes or message.requested_bytes
    dims, bits = parse_shape(message.shape), element_bits(message.dtype)
    return math.prod(dims) * bits // 8 if dims is not None and bits else None


def _why(message: OomMessage, free: int | None) -> tuple[str | None, int | None]:
    asked = _requested(message)
    if message.phase == "compile":
        if asked is not None and message.limit_bytes is not None:
            return COMPILE, max(0, asked - message.limit_bytes)
        return COMPILE, None
    return verdict(asked, free)


def verdict(asked: int | None, free: int | None) -> tuple[str | None, int | None]:
    """Why an allocation failed: too little free memory (and short by how much),
    or free memory in pieces none of which was large enough; (None, None) where
    either figure is unknown."""
    if asked is None or free is None:
        return None, None
    if asked > free:
        return NOT_ENOUGH, asked - free
    return FRAGMENTED, None


def demand_floor(failures: tuple[OutOfMemory, ...], device: str) -> int | None:
    """What a run that failed on `device` needs at the least: more than the limit it
    failed under, and at least what was in use plus what it asked for."""
    floor = None
    for oom in failures:
        if (oom.device != device and oom.device is not None) or oom.phase == KILLED:
            continue  # (a kill says the host's memory ran out, not the device's)
        candidates = []
        if oom.phase == "compile" and oom.requested_bytes is not None:
            candidates.append(oom.requested_bytes)  # what the program needs, whole
        elif oom.in_use_bytes is not None and oom.requested_bytes is not None:
            candidates.append(oom.in_use_bytes + oom.requested_bytes)
        if oom.limit_bytes is not None:
            candidates.append(oom.limit_bytes + 1)
        if candidates:
            floor = max(floor or 0, *candidates)
    return floor
