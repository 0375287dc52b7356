"""The HloProto fields tpumem reads, by XLA's field numbers (xla/service/hlo.proto,
xla/xla_data.proto). Enums (primitive types, heap-simulator event kinds) are read as
the integers they are on the wire."""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf.message import DecodeError

from tpumem.protos import BOOL, I32, I64, MSG, STR, Field, message_classes

_MESSAGES: dict[str, list[Field]] = {
    "HloProto": [
        ("hlo_module", 1, MSG, "HloModuleProto", False),
        ("buffer_assignment", 3, MSG, "BufferAssignmentProto", False),
    ],
    "HloModuleProto": [
        ("name", 1, STR, None, False),
        ("entry_computation_name", 2, STR, None, False),
        ("computations", 3, MSG, "HloComputationProto", True),
        ("id", 5, I64, None, False),
        ("entry_computation_id", 6, I64, None, False),
        ("stack_frame_index", 17, MSG, "StackFrameIndexProto", False),
        ("buffer_donor", 18, MSG, "BufferDonorProto", False),
    ],
    "BufferDonorProto": [("entries", 1, MSG, "BufferDonorProto.Entry", True)],
    "BufferDonorProto.Entry": [("parameter_number", 1, I64, None, False)],
    "HloComputationProto": [
        ("name", 1, STR, None, False),
        ("instructions", 2, MSG, "HloInstructionProto", True),
        ("id", 5, I64, None, False),
        ("root_id", 6, I64, None, False),
    ],
    "HloInstructionProto": [
        ("name", 1, STR, None, False),
        ("opcode", 2, STR, None, False),
        ("shape", 3, MSG, "ShapeProto", False),
        ("metadata", 7, MSG, "OpMetadata", False),
        ("parameter_number", 9, I64, None, False),
        ("id", 35, I64, None, False),
        ("operand_ids", 36, I64, None, True),
        ("custom_call_target", 28, STR, None, False),
        ("called_computation_ids", 38, I64, None, True),
        ("sharding", 40, MSG, "OpSharding", False),
    ],
    "OpSharding": [
        ("type", 1, I32, None, False),
        ("tile_assignment_dimensions", 3, I64, None, True),
        ("tile_assignment_devices", 4, I64, None, True),
        ("tuple_shardings", 5, MSG, "OpSharding", True),
        ("iota_reshape_dims", 9, I64, None, True),
    ],
    "ShapeProto": [
        ("element_type", 2, I32, None, False),
        ("dimensions", 3, I64, None, True),
        ("tuple_shapes", 4, MSG, "ShapeProto", True),
        ("layout", 5, MSG, "LayoutProto", False),
        ("is_dynamic_dimension", 6, BOOL, None, True),
    ],
    "LayoutProto": [
        ("minor_to_major", 1, I64, None, True),
        ("tiles", 6, MSG, "TileProto", True),
        ("element_size_in_bits", 7, I64, None, False),
        ("memory_space", 8, I64, None, False),
        ("tail_padding_alignment_in_elements", 16, I64, None, False),
    ],
    "TileProto": [("dimensions", 1, I64, None, True)],
    "OpMetadata": [
        ("op_type", 1, STR, None, False),
        ("op_name", 2, STR, None, False),
        ("source_file", 3, STR, None, False),
        ("source_line", 4, I32, None, False),
        ("stack_frame_id", 15, I32, None, False),
    ],
    "StackFrameIndexProto": [
        ("file_names", 1, STR, None, True),
        ("function_names", 2, STR, None, True),
        ("file_locations", 3, MSG, "StackFrameIndexProto.FileLocation", True),
        ("stack_frames", 4, MSG, "StackFrameIndexProto.StackFrame", True),
    ],
    "StackFrameIndexProto.FileLocation": [
        ("file_name_id", 1, I32, None, False),
        ("function_name_id", 2, I32, None, False),
        ("line", 3, I32, None, False),
        ("column", 4, I32, None, False),
    ],
    "StackFrameIndexProto.StackFrame": [
        ("file_location_id", 1, I32, None, False),
        ("parent_frame_id", 2, I32, None, False),
    ],
    "BufferAssignmentProto": [
        ("logical_buffers", 1, MSG, "LogicalBufferProto", True),
        ("buffer_allocations", 3, MSG, "BufferAllocationProto", True),
        ("heap_simulator_traces", 4, MSG, "HeapSimulatorTrace", True),
    ],
    "LogicalBufferProto": [
        ("id", 1, I64, None, False),
        ("size", 2, I64, None, False),
        ("defined_at", 3, MSG, "LogicalBufferProto.Location", False),
        ("color", 4, I64, None, False),
    ],
    "LogicalBufferProto.Location": [
        ("instruction_name", 2, STR, None, False),
        ("shape_index", 3, I64, None, True),
        ("instruction_id", 4, I64, None, False),
    ],
    "BufferAllocationProto": [
        ("index", 1, I64, None, False),
        ("size", 2, I64, None, False),
        ("is_thread_local", 3, BOOL, None, False),
        ("is_entry_computation_parameter", 5, BOOL, None, False),
        ("parameter_number", 6, I64, None, False),
        ("maybe_live_out", 7, BOOL, None, False),
        ("color", 8, I64, None, False),
        ("assigned", 9, MSG, "BufferAllocationProto.Assigned", True),
        ("is_tuple", 11, BOOL, None, False),
        ("is_constant", 12, BOOL, None, False),
        ("is_parameter_aliased_with_output", 13, BOOL, None, False),
    ],
    "BufferAllocationProto.Assigned": [
        ("logical_buffer_id", 1, I64, None, False),
        ("offset", 2, I64, None, False),
        ("size", 3, I64, None, False),
    ],
    "HeapSimulatorTrace": [
        ("events", 1, MSG, "HeapSimulatorTrace.Event", True),
        ("whole_module_simulation", 2, BOOL, None, False),
        ("buffer_allocation_index", 3, I64, None, False),
    ],
    "HeapSimulatorTrace.Event": [
        ("kind", 1, I32, None, False),
        ("buffer_id", 2, I64, None, False),
        ("computation_name", 3, STR, None, False),
        ("instruction_name", 4, STR, None, False),
        ("share_with_canonical_id", 5, I64, None, False),
    ],
}

# HeapSimulatorTrace.Event.Kind
ALLOC, FREE, SHARE_WITH = 0, 1, 2


class HloError(ValueError):
    """The bytes are not an HloProto tpumem can read."""


@cache
def hlo_messages() -> dict[str, Any]:
    """Message classes of the HloProto subset, by name (tests build protos with them)."""
    return message_classes("tpumem_hlo", _MESSAGES)


def parse_hlo_proto(data: bytes) -> Any:
    """An HloProto (module and buffer assignment) from its serialized bytes."""
    proto = hlo_messages()["HloProto"]()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RecursionError) as error:
        raise HloError(f"not an HloProto ({error})") from None
    if not proto.hlo_module.name and not proto.hlo_module.computations:
        raise HloError("an HloProto without a module")
    return proto
