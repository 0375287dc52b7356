"""What fills a compiled program: its heap over program order, the peak, and the
buffers live there, from XLA's own buffer assignment (an HloProto).

XLA plans a program's memory when it compiles it: every value the program makes
is a logical buffer, placed in a buffer allocation. Allocations for parameters,
outputs, constants and thread-local values live for the whole program; the
temporaries share one allocation whose use over program order XLA's heap
simulator recorded as ALLOC, FREE and SHARE_WITH events. The figures follow
XProf's memory_viewer (xprof/convert/hlo_proto_to_memory_visualization_utils.cc,
as tensorboard-plugin-profile 2.24 ships it) so the two agree: the peak heap is
the simulated heap's peak plus every whole-program allocation, and the buffers
live at the peak are those allocations' largest logical buffer each, then the
heap's buffers at the peak.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tpumem.analysis.compiled.op_passes import BACKWARD, has_tape, op_pass
from tpumem.hlo.schema import ALLOC, FREE, SHARE_WITH, HloError, parse_hlo_proto
from tpumem.hlo.shapes import dims_text, element_name, shape_text, subshape, unpadded_bytes
from tpumem.trace.stack_rows import Frame, Stack

HBM = 0  # memory space (color) of the device's main memory
_OUTER_JIT = re.compile(r"^jit\([^()]*\)/")

PARAMETER, OUTPUT, CONSTANT, TEMPORARY = "parameter", "output", "constant", "temporary"


@dataclass(frozen=True, slots=True)
class HeapBuffer:
    """A logical buffer of a program: one value XLA gave memory."""

    logical_buffer_id: int
    bytes: int
    unpadded_bytes: int  # the elements without layout padding
    instruction: str  # the HLO instruction that defines it, {shape index} for a tuple's part
    opcode: str
    shape: str  # as XLA prints it, with its layout
    dtype: str
    dims: str
    op_name: str  # the framework's op, from the HLO metadata
    source: str | None  # file:line, from the HLO metadata
    stack: str  # the source frames XLA kept, innermost first, one per line
    group: str  # PARAMETER, OUTPUT, CONSTANT or TEMPORARY
    allocation: int  # index of its buffer allocation
    frames: Stack = ()  # the same frames with their functions, outermost first
    # Its allocation may be live out: an output, or an argument an output aliases
    # (a donated argument: the output takes its memory).
    live_out: bool = False
    parameter_number: int = -1  # the program's argument it is (PARAMETER), else -1
    allocation_bytes: int = 0  # its allocation's size (the allocation may hold others)

    @property
    def padding_bytes(self) -> int:
        return max(0, self.bytes - self.unpadded_bytes)

    @property
    def short_shape(self) -> str:
        # The layout matters where it pads (TPU tiles); a plain row-major one is noise.
        return self.shape if ":" in self.shape else self.dtype + self.dims

    @property
    def short_op(self) -> str:
        # JAX names every op inside a program after it (`jit(step)/...`): within
        # that program the prefix says nothing.
        return _OUTER_JIT.sub("", self.op_name)


@dataclass(frozen=True, slots=True)
class ProgramHeap:
    """One compiled program's memory plan, in one memory space."""

    module: str
    module_id: int
    entry_computation: str
    memory_space: int
    peak_bytes: int  # whole-program allocations + the heap at its peak
    peak_unpadded_bytes: int
    peak_position: int  # the heap-simulator event that reached the peak
    peak_instruction: str  # the instruction whose buffer the heap took there
    whole_program_bytes: int  # parameters, outputs and constants
    parameter_bytes: int
    output_bytes: int  # allocations that may be live out (outputs)
    total_allocation_bytes: int  # every allocation's size
    heap_bytes: tuple[int, ...]  # before each heap event, then after the last; with the above
    heap_instructions: tuple[str, ...]  # the instruction of each event ("" at the end)
    live_at_peak: tuple[HeapBuffer, ...]  # largest first
    has_heap_trace: bool  # False: XLA recorded no heap simulation (temps not placed)
    # Some instruction is of a backward pass (op_passes.py): a training step, whose
    # forward values live at its peak are kept for the gradient.
    has_backward: bool = False
    # Each whole-program allocation's own value (an argument, an output, a
    # constant), in live_at_peak's place of XProf's largest buffer of it.
    whole_values: tuple[HeapBuffer, ...] = ()
    # The temporaries' values at their peak, at their elements' bytes; with no heap
    # trace, the bytes of their allocations the plan's offsets give any value.
    temp_value_bytes: int = 0

    @property
    def temp_peak_bytes(self) -> int:
        return self.peak_bytes - self.whole_program_bytes


def device_allocations(assignment: Any) -> list[Any]:
    """The allocations that take device memory: not the thread-local ones, whose
    values the CPU backend keeps on its threads' stacks (XLA's temp size and
    XProf's memory_viewer leave them out too)."""
    return [a for a in assignment.buffer_allocations if not a.is_thread_local]


def _group(allocation: Any) -> str:
    if allocation.is_entry_computation_parameter:
        return PARAMETER
    if allocation.maybe_live_out:
        return OUTPUT
    if allocation.is_constant:
        return CONSTANT
    return TEMPORARY


def _whole_program(allocation: Any) -> bool:
    return _group(allocation) != TEMPORARY


def instruction_source(instruction: Any, frames: Any) -> tuple[str | None, str]:
    """(file:line, the stack as file:line:column lines), as XProf reads them: the
    metadata's own file and line first, else the innermost stack frame."""
    source, stack, _ = instruction_frames(instruction, frames)
    return source, stack


def instruction_frames(instruction: Any, frames: Any) -> tuple[str | None, str, Stack]:
    """instruction_source's two, and the stack's frames with their functions,
    outermost first (what a flame graph draws under the call that ran the program)."""
    stack: list[str] = []
    found: list[Frame] = []
    frame_id = instruction.metadata.stack_frame_id
    seen = set()
    while 0 < frame_id <= len(frames.stack_frames) and frame_id not in seen:
        seen.add(frame_id)
        frame = frames.stack_frames[frame_id - 1]
        frame_id = frame.parent_frame_id
        location_id = frame.file_location_id
        if not 0 < location_id <= len(frames.file_locations):
            continue
        location = frames.file_locations[location_id - 1]
        name = _indexed(frames.file_names, location.file_name_id)
        stack.append(f"{name}:{location.line}:{location.column}")
        function = _indexed(frames.function_names, location.function_name_id)
        found.append(Frame(name, location.line, function))
    metadata = instruction.metadata
    outermost_first = tuple(reversed(found))
    if metadata.source_file:
        return f"{metadata.source_file}:{metadata.source_line}", "\n".join(stack), outermost_first
    if stack:
        file, line, _ = stack[0].rsplit(":", 2)
        return f"{file}:{line}", "\n".join(stack), outermost_first
    return None, "", ()


def _indexed(names: Any, one_based: int) -> str:
    return names[one_based - 1] if 0 < one_based <= len(names) else ""


class _Buffers:
    """The logical buffers of a buffer assignment, by id, with their instructions."""

    def __init__(self, proto: Any) -> None:
        module, assignment = proto.hlo_module, proto.buffer_assignment
        self.frames = module.stack_frame_index
        self.instructions = {
            instruction.id: instruction
            for computation in module.computations
            for instruction in computation.instructions
        }
        # The values the program returns: its root (a tuple's elements are its
        # operands' values).
        entry = next((c for c in module.computations if c.id == module.entry_computation_id), None)
        root = self.instructions.get(entry.root_id) if entry is not None else None
        self.returned = set() if root is None else {root.id, *root.operand_ids}
        logical = {buffer.id: buffer for buffer in assignment.logical_buffers}
        self.allocation_of: dict[int, Any] = {}
        self.logical: dict[int, Any] = {}
        for allocation in device_allocations(assignment):
            for assigned in allocation.assigned:
                buffer = logical.get(assigned.logical_buffer_id)
                if buffer is None or buffer.defined_at.instruction_id not in self.instructions:
                    continue
                self.logical[buffer.id] = buffer
                self.allocation_of[buffer.id] = allocation
        self._made: dict[int, HeapBuffer] = {}

    def own_value(self, buffer_id: int) -> bool:
        """Whether the buffer is its allocation's own value: the argument's, or
        the value returned (not another value sharing its memory)."""
        defined = self.logical[buffer_id].defined_at.instruction_id
        if self.allocation_of[buffer_id].is_entry_computation_parameter:
            return bool(self.instructions[defined].opcode == "parameter")
        return defined in self.returned

    def heap_buffer(self, buffer_id: int) -> HeapBuffer:
        made = self._made.get(buffer_id)
        if made is not None:
            return made
        buffer = self.logical[buffer_id]
        instruction = self.instructions[buffer.defined_at.instruction_id]
        index = list(buffer.defined_at.shape_index)
        shape = subshape(instruction.shape, index)
        source, stack, frames = instruction_frames(instruction, self.frames)
        allocation = self.allocation_of[buffer_id]
        name = instruction.name + ("{" + ",".join(map(str, index)) + "}" if index else "")
        made = self._made[buffer_id] = HeapBuffer(
            logical_buffer_id=buffer.id,
            bytes=buffer.size,
            unpadded_bytes=unpadded_bytes(shape),
            instruction=name,
            opcode=instruction.opcode,
            shape=shape_text(shape),
            dtype=element_name(shape.element_type),
            dims=dims_text(shape),
            op_name=instruction.metadata.op_name,
            source=source,
            stack=stack,
            group=_group(allocation),
            allocation=allocation.index,
            frames=frames,
            live_out=bool(allocation.maybe_live_out),
            parameter_number=(
                allocation.parameter_number if allocation.is_entry_computation_parameter else -1
            ),
            allocation_bytes=allocation.size,
        )
        return made


def _heap_trace(proto: Any, buffers: _Buffers, color: int) -> Any | None:
    """The heap-simulator trace of the memory space's temporaries, chosen as XProf
    chooses it: the one whose first event's buffer lies in a temporary allocation
    of that space (the largest such allocation, when there are several), else the
    trace with the most events in that space."""
    traces = proto.buffer_assignment.heap_simulator_traces
    best, best_size = None, -1
    for trace in traces:
        if not trace.events:
            continue
        allocation = buffers.allocation_of.get(trace.events[0].buffer_id)
        if allocation is None or allocation.color != color or _whole_program(allocation):
            continue
        if allocation.size > best_size:
            best, best_size = trace, allocation.size
    if best is not None:
        return best
    counts = [
        sum(
            1
            for event in trace.events
            if event.buffer_id in buffers.logical
            and buffers.logical[event.buffer_id].color == color
        )
        for trace in traces
    ]
    if counts and max(counts) > 0:
        return traces[counts.index(max(counts))]
    return None


def program_heap(data: bytes, color: int = HBM) -> ProgramHeap:
    """A program's memory plan from its HloProto bytes. Raises HloError."""
    proto = parse_hlo_proto(data)
    buffers = _Buffers(proto)
    allocations = [a for a in device_allocations(proto.buffer_assignment) if a.color == color]
    whole = [a for a in allocations if _whole_program(a)]
    whole_bytes = sum(a.size for a in whole)

    live: list[HeapBuffer] = []
    values: list[HeapBuffer] = []
    for allocation in whole:
        # An allocation holds several logical buffers (a parameter and its alias,
        # an output tuple's parts); XProf shows the largest.
        ids = [
            a.logical_buffer_id
            for a in allocation.assigned
            if a.logical_buffer_id in buffers.logical
        ]
        if ids:
            largest = max(ids, key=lambda i: buffers.logical[i].size)
            live.append(buffers.heap_buffer(largest))
            # Its own value: the argument's, or the one returned (of equal sizes,
            # another value sharing the memory may pad to as many bytes on a TPU).
            own = max(ids, key=lambda i: (buffers.own_value(i), buffers.logical[i].size))
            values.append(buffers.heap_buffer(own))

    trace = _heap_trace(proto, buffers, color)
    heap = _simulate(trace, buffers) if trace is not None else _Simulation()
    # SHARE_WITH reuses the canonical buffer's memory: the buffer shown is the
    # one that uses it at the peak.
    live += [buffers.heap_buffer(heap.peak_display.get(i, i)) for i in heap.peak_buffers]
    live.sort(key=lambda b: (-b.bytes, b.instruction))
    module = proto.hlo_module
    return ProgramHeap(
        module=module.name,
        module_id=module.id,
        entry_computation=module.entry_computation_name,
        memory_space=color,
        peak_bytes=heap.peak + whole_bytes,
        peak_unpadded_bytes=heap.peak_unpadded + whole_bytes,
        peak_position=heap.peak_position,
        peak_instruction=heap.instructions[heap.peak_position] if heap.instructions else "",
        whole_program_bytes=whole_bytes,
        parameter_bytes=sum(a.size for a in allocations if a.is_entry_computation_parameter),
        output_bytes=sum(a.size for a in allocations if a.maybe_live_out),
        total_allocation_bytes=sum(a.size for a in allocations),
        heap_bytes=tuple(size + whole_bytes for size in heap.sizes),
        heap_instructions=tuple(heap.instructions),
        live_at_peak=tuple(live),
        has_heap_trace=trace is not None,
        has_backward=_has_backward(buffers),
        whole_values=tuple(values),
        temp_value_bytes=heap.peak_unpadded
        if trace is not None
        else sum(_covered(a) for a in allocations if not _whole_program(a)),
    )


def _covered(allocation: Any) -> int:
    """The bytes of an allocation that some buffer assigned to it occupies (values
    whose lives do not overlap share their bytes; alignment leaves gaps)."""
    covered, end = 0, 0
    for offset, size in sorted((a.offset, a.size) for a in allocation.assigned):
        start = max(offset, end)
        if offset + size > start:
            covered += offset + size - start
        end = max(end, offset + size)
    return covered


def _has_backward(buffers: _Buffers) -> bool:
    names = [i.metadata.op_name for i in buffers.instructions.values()]
    tape = has_tape(names)
    return any(op_pass(name, tape) == BACKWARD for name in names)


class _Simulation:
    def __init__(self) -> None:
        self.size = self.unpadded = 0
        self.peak = self.peak_unpadded = self.peak_position = 0
        self.sizes: list[int] = []
        self.instructions: list[str] = []
        self.live: dict[int, None] = {}  # canonical buffer ids, in the order they came
        self.peak_buffers: list[int] = []
        self.display: dict[int, int] = {}  # canonical id -> the buffer now using it
        self.peak_display: dict[int, int] = {}

    def take(self, buffer_id: int, buffers: _Buffers) -> None:
        self.live[buffer_id] = None
        self.size += buffers.logical[buffer_id].size
        self.unpadded += buffers.heap_buffer(buffer_id).unpadded_bytes
        if self.size > self.peak:
            self.peak, self.peak_unpadded = self.size, self.unpadded
            self.peak_position = len(self.sizes) - 1
            self.peak_buffers = list(self.live)
            self.peak_display = dict(self.display)

    def give(self, buffer_id: int, buffers: _Buffers) -> None:
        self.live.pop(buffer_id, None)
        self.size -= buffers.logical[buffer_id].size
        self.unpadded -= buffers.heap_buffer(buffer_id).unpadded_bytes
        if self.size < 0:
            raise HloError("the heap simulation frees more than it allocated")


def _simulate(trace: Any, buffers: _Buffers) -> _Simulation:
    """Walks the heap-simulator events with XProf's reference counting: a buffer
    that SHARE_WITHs another holds the other's memory; memory comes back when the
    last of them is freed."""
    run = _Simulation()
    counts: dict[int, int] = {}
    canonical: dict[int, int] = {}

    def root(buffer_id: int) -> int:
        seen = set()
        while buffer_id in canonical and buffer_id not in seen:
            seen.add(buffer_id)
            buffer_id = canonical[buffer_id]
        return buffer_id

    for event in trace.events:
        run.sizes.append(run.size)
        run.instructions.append(event.instruction_name)
        buffer_id = event.buffer_id
        if buffer_id not in buffers.logical:
            continue
        if event.kind == ALLOC:
            top = root(buffer_id)
            counts[top] = counts.get(top, 0) + 1
            run.take(buffer_id, buffers)
        elif event.kind == FREE:
            top = root(buffer_id)
            counts[top] = counts.get(top, 0) - 1
            if counts[top] < 0:
                raise HloError(f"buffer {buffer_id} is freed more than once")
            if counts[top] == 0:
                run.give(top, buffers)
        elif event.kind == SHARE_WITH:
            target = event.share_with_canonical_id
            if target not in buffers.logical:
                continue
            canonical[buffer_id] = target
            top = root(target)
            counts[top] = counts.get(top, 0) + 1
            if counts[top] == 1:  # the canonical buffer was freed: its memory is taken again
                run.display[top] = buffer_id
                run.take(top, buffers)
        else:
            raise HloError(f"a heap event of unknown kind {event.kind}")
    run.sizes.append(run.size)
    run.instructions.append("")
    return run
