"""Compiled programs in an XSpace, where TSL's profilers put them: on the plane
`/host:metadata`, one event metadata per program (its id the program id, its
name `module(program id)`), whose stat "Hlo Proto" holds the HloProto's bytes.
XProf's memory_viewer and graph_viewer read them from there (and list the
tools only when they are there)."""

from __future__ import annotations

from typing import Any

from tpumem.xplane.schema import messages

METADATA_PLANE = "/host:metadata"
HLO_PROTO_STAT = "Hlo Proto"  # TSL's name for StatType::kHloProto
PROGRAM_ID_STAT = "program_id"


def module_file_name(module: str, program_id: int) -> str:
    """A program's name as XProf names it (and the file it keeps it in, less
    `.hlo_proto.pb`): TSL's HloModuleNameWithProgramId."""
    return f"{module}({program_id})"


def read_hlo_protos(space: Any) -> list[tuple[int, bytes]]:
    """(program id, HloProto bytes) of every program the XSpace carries, in
    program-id order, each once."""
    found: dict[int, bytes] = {}
    for plane in space.planes:
        if plane.name != METADATA_PLANE:
            continue
        ids = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for key, event in plane.event_metadata.items():
            program_id, data = int(key), None
            for stat in event.stats:
                name = ids.get(stat.metadata_id)
                if name == HLO_PROTO_STAT and stat.WhichOneof("value") == "bytes_value":
                    data = stat.bytes_value
                elif name == PROGRAM_ID_STAT:
                    program_id = int(stat.int64_value or stat.uint64_value)
            if data:
                found.setdefault(program_id, data)
    return sorted(found.items())


def metadata_plane(programs: list[tuple[int, str, bytes]], plane_id: int) -> bytes:
    """The serialized XPlane `/host:metadata` holding (program id, module name,
    HloProto bytes) for each program."""
    m = messages("full")
    plane = m["XPlane"](id=plane_id, name=METADATA_PLANE)
    plane.stat_metadata[1].id = 1
    plane.stat_metadata[1].name = HLO_PROTO_STAT
    for program_id, module, data in programs:
        event = plane.event_metadata[program_id]
        event.id = program_id
        event.name = module_file_name(module, program_id)
        event.stats.add(metadata_id=1, bytes_value=data)
    return plane.SerializeToString()
