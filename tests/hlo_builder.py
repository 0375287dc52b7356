"""Hand-made HloProtos: a module with one instruction per logical buffer and a
buffer assignment around them, for the heap walk's rules and for hostile traces."""

from __future__ import annotations

from collections.abc import Callable

from tpumem.hlo.schema import hlo_messages


def hlo_proto(
    sizes: dict[int, int],
    events: list[tuple],
    whole: dict[int, str],
    names: Callable[[int], str] = lambda i: f"i{i}",
    op: Callable[[int], str] = lambda i: f"op{i}",
    source: str = "/work/model.py",
    module_name: str = "handmade",
) -> bytes:
    """An HloProto with one instruction per logical buffer; `whole`: buffers in
    whole-program allocations (id -> "parameter"/"output"), the rest in one temp
    allocation whose heap trace is `events` (kind, buffer, share_with)."""
    m = hlo_messages()
    proto = m["HloProto"]()
    module = proto.hlo_module
    module.name, module.id = module_name, 7
    computation = module.computations.add(name="main")
    for buffer_id, size in sizes.items():
        instruction = computation.instructions.add(
            name=names(buffer_id), opcode="add", id=buffer_id
        )
        instruction.shape.element_type = 11  # f32
        instruction.shape.dimensions.append(size // 4)
        instruction.metadata.op_name = op(buffer_id)
        instruction.metadata.source_file = source
        instruction.metadata.source_line = buffer_id
        logical = proto.buffer_assignment.logical_buffers.add(id=buffer_id, size=size)
        logical.defined_at.instruction_id = buffer_id
    assignment = proto.buffer_assignment
    temps = assignment.buffer_allocations.add(index=0, size=sum(sizes.values()))
    for index, (buffer_id, kind) in enumerate(whole.items(), start=1):
        allocation = assignment.buffer_allocations.add(index=index, size=sizes[buffer_id])
        allocation.is_entry_computation_parameter = kind == "parameter"
        allocation.maybe_live_out = kind == "output"
        allocation.assigned.add(logical_buffer_id=buffer_id, size=sizes[buffer_id])
    for buffer_id in sizes:
        if buffer_id not in whole:
            temps.assigned.add(logical_buffer_id=buffer_id, size=sizes[buffer_id])
    trace = assignment.heap_simulator_traces.add()
    for kind, buffer_id, *share in events:
        event = trace.events.add(kind=kind, buffer_id=buffer_id, instruction_name=names(buffer_id))
        if share:
            event.share_with_canonical_id = share[0]
    return proto.SerializeToString()
