"""What the frameworks' out-of-memory messages say, read from their text.

Each framework says it its own way; what one message gives, this reads, and nothing
is guessed for what it leaves out:
- TensorFlow's exception: "OOM when allocating tensor with shape[1024,2304] and type
  float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator ..." (the op in
  "{{function_node __wrapped__Fill_device_...}}" or "[Op:Fill]").
- The BFC allocator's log (TensorFlow's and XLA's, on stderr): "Allocator (NAME) ran
  out of memory trying to allocate 9.00MiB (rounded to 9437184)requested by op Fill",
  then its "Stats:" block (Limit, InUse, LargestFreeBlock, ...).
- XLA's runtime status (JAX, PyTorch/XLA): "RESOURCE_EXHAUSTED: Out of memory while
  trying to allocate 4.00GiB with allocator GPU_0_bfc on device 0" (GPU); "Error
  allocating device buffer: Attempting to allocate 196.00M. That was not possible.
  There are 134.44M free.; (1x0x0_HBM0)" (TPU); "Failed to allocate request for
  32.00MiB (33554432B) on device ordinal 0"; "Attempting to reserve 10.51G at the
  bottom of memory. That was not possible. There are 8.97G free, ...".
- XLA:TPU at compile time: "Ran out of memory in memory space hbm. Used 21.95G of
  15.48G hbm. Exceeded hbm capacity by 6.47G." and its "Largest program allocations".

Sizes written with two decimals ("4.39G") are the message's own rounding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = r"(\d+(?:\.\d+)?)\s?([KMGT]?)(?:i?B)?"


def size_bytes(number: str, unit: str) -> int:
    return round(float(number) * _UNITS[unit.upper()])


@dataclass(frozen=True, slots=True)
class CompiledAllocation:
    """One of XLA:TPU's "Largest program allocations" at a failed compile."""

    bytes: int
    shape: str | None
    op: str | None
    source: str | None  # file:line from the op's metadata


@dataclass(frozen=True, slots=True)
class OomMessage:
    """What an out-of-memory message says; None where it says nothing."""

    phase: str  # "run": an allocation failed; "compile": XLA's plan does not fit
    text: str  # the line that says it
    requested_bytes: int | None = None
    rounded_bytes: int | None = None  # the allocator's size for the request
    in_use_bytes: int | None = None
    limit_bytes: int | None = None
    free_bytes: int | None = None
    largest_free_block_bytes: int | None = None
    op: str | None = None
    shape: str | None = None
    dtype: str | None = None
    device: str | None = None
    allocator: str | None = None
    largest: tuple[CompiledAllocation, ...] = ()


def _match(pattern: str, text: str) -> re.Match[str] | None:
    return re.search(pattern, text, re.DOTALL)


def _line_of(text: str, at: int) -> str:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return text[start : end if end >= 0 else len(text)].strip()


def _device(name: str) -> str:
    """TensorFlow's full device name as tpumem names devices ("CPU:0")."""
    found = re.search(r"device:([A-Z]+:\d+)", name)
    return found.group(1) if found else name


def _tensorflow(text: str) -> OomMessage | None:
    found = _match(
        r"OOM when allocating tensor (?:with|of) shape\s*\[([^\]]*)\] and type (\w+)"
        r"(?: on (\S+))?(?: by allocator (\w+))?",
        text,
    )
    if found is None:
        return None
    op = _match(r"\{\{function_node __wrapped__(\w+?)_device_", text) or _match(
        r"\[Op:(\w+)\]", text
    )
    return OomMessage(
        phase="run",
        text=_line_of(text, found.start()),
        shape=f"[{found.group(1).replace(' ', '')}]",
        dtype=found.group(2),
        device=_device(found.group(3)) if found.group(3) else None,
        allocator=found.group(4),
        op=op.group(1) if op else None,
    )


def _xla_runtime(text: str) -> OomMessage | None:
    gpu = _match(
        rf"Out of memory while trying to allocate {_SIZE}"
        r"(?: with allocator (\S+))?(?: on device (\d+))?",
        text,
    )
    if gpu is not None:
        device = f"{gpu.group(3)[:3].upper()}:{gpu.group(4)}" if gpu.group(4) else None
        program = _match(r"\[executable_name='([^']*)'\]", text)
        return OomMessage(
            phase="run",
            text=_line_of(text, gpu.start()),
            requested_bytes=size_bytes(gpu.group(1), gpu.group(2)),
            allocator=gpu.group(3),
            device=device if gpu.group(3) and gpu.group(3).startswith("GPU") else None,
            op=program.group(1) if program else None,
        )
    tpu = _match(
        rf"Attempting to (?:allocate|reserve) {_SIZE}.*?That was not possible\. "
        rf"There are {_SIZE} free",
        text,
    )
    if tpu is not None:
        return OomMessage(
            phase="run",
            text=_line_of(text, tpu.start()),
            requested_bytes=size_bytes(tpu.group(1), tpu.group(2)),
            free_bytes=size_bytes(tpu.group(3), tpu.group(4)),
        )
    old = _match(rf"Failed to allocate request for {_SIZE} \((\d+)B\)", text)
    if old is not None:
        return OomMessage(
            phase="run", text=_line_of(text, old.start()), requested_bytes=int(old.group(3))
        )
    return None


def _xla_compile(text: str) -> OomMessage | None:
    found = _match(
        rf"Ran out of memory in memory space (\w+)\. Used {_SIZE} of {_SIZE} \1",
        text,
    )
    if found is None:
        return None
    largest = []
    for entry in re.finditer(r"\d+\. Size: " + _SIZE + r"(.*?)(?====|\n\s*\n|\Z)", text, re.S):
        body = entry.group(3)
        shape = re.search(r"Shape: (\S+)", body)
        op = re.search(r'op_name="([^"]*)"', body)
        file = re.search(r'source_file="([^"]*)" source_line=(\d+)', body)
        largest.append(
            CompiledAllocation(
                bytes=size_bytes(entry.group(1), entry.group(2)),
                shape=shape.group(1) if shape else None,
                op=op.group(1) if op else None,
                source=f"{file.group(1)}:{file.group(2)}" if file else None,
            )
        )
    return OomMessage(
        phase="compile",
        text=_line_of(text, found.start()),
        requested_bytes=size_bytes(found.group(2), found.group(3)),
        limit_bytes=size_bytes(found.group(4), found.group(5)),
        device=found.group(1),
        largest=tuple(largest),
    )


def parse_exception(text: str) -> OomMessage | None:
    """An out-of-memory error's message (an exception's text), or None if the text
    is not one."""
    if "RESOURCE_EXHAUSTED" not in text and "OOM when allocating" not in text:
        return None
    for parse in (_xla_compile, _tensorflow, _xla_runtime):
        found = parse(text)
        if found is not None:
            return found
    return OomMessage(phase="run", text=_line_of(text, text.find("RESOURCE_EXHAUSTED")))


_BFC_HEAD = re.compile(
    rf"Allocator \((\S+)\) ran out of memory trying to allocate {_SIZE}"
    r" \(rounded to (\d+)\)\s*(?:requested by op (\S+))?"
)
_STAT = re.compile(rf"^(Limit|InUse|LargestFreeBlock):\s+{_SIZE}\s*$")


_POOL = re.compile(rf"Total size in pool: {_SIZE}.*available size: {_SIZE}")


def parse_allocator_log(
    text: str, chunks_in_use: int | None = None, largest_free_chunk: int | None = None
) -> OomMessage | None:
    """The BFC allocator's out-of-memory log (its first line to its "Stats:").
    `chunks_in_use` and `largest_free_chunk`: summed from its chunk dump, where
    the reader saw one; exact, where the stats are rounded to 0.01 MiB."""
    head = _BFC_HEAD.search(text)
    if head is None:
        return None
    stats = {}
    for line in text.splitlines():
        stat = _STAT.match(line.strip())
        if stat:
            stats[stat.group(1)] = size_bytes(stat.group(2), stat.group(3))
    # The largest block it could have handed out: a free chunk, or the room the
    # limit left to grow the pool (which was less than asked, or it would have).
    # Its stats say LargestFreeBlock 0B unless told to track it: not a figure.
    largest = stats.get("LargestFreeBlock") or None
    pool = _POOL.search(text)
    if largest_free_chunk is not None and pool is not None:
        largest = max(largest_free_chunk, size_bytes(pool.group(3), pool.group(4)))
    return OomMessage(
        phase="run",
        text=_line_of(text, head.start()),
        requested_bytes=size_bytes(head.group(2), head.group(3)),
        rounded_bytes=int(head.group(4)),
        allocator=head.group(1),
        op=head.group(5) or None,
        limit_bytes=stats.get("Limit"),
        in_use_bytes=chunks_in_use if chunks_in_use is not None else stats.get("InUse"),
        largest_free_block_bytes=largest,
    )


def combine(exception: OomMessage, log: OomMessage) -> OomMessage:
    """One failure said twice, by the exception and by the allocator's log: each
    field from whichever says it (the log's bytes are the allocator's own)."""
    fields = {
        name: getattr(log, name) if getattr(log, name) is not None else getattr(exception, name)
        for name in (
            "requested_bytes",
            "rounded_bytes",
            "in_use_bytes",
            "limit_bytes",
            "free_bytes",
            "largest_free_block_bytes",
        )
    }
    return replace(
        exception,
        op=exception.op or log.op,
        allocator=exception.allocator or log.allocator,
        **fields,
    )
