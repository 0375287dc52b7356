"""The XSpace protobuf messages, built at run time from their field numbers.

Two variants share the field numbers of TSL's xplane.proto:
- `full`: every message as declared, for writing profiles;
- `lazy`: an XLine's events are kept as raw bytes, so upb parses the planes and
  lines in C and the events (the bulk) are decoded column-wise by tpumem.xplane.wire.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
_I64, _U64, _DBL, _STR, _BYTES, _MSG = (
    _F.TYPE_INT64,
    _F.TYPE_UINT64,
    _F.TYPE_DOUBLE,
    _F.TYPE_STRING,
    _F.TYPE_BYTES,
    _F.TYPE_MESSAGE,
)

# message -> [(field, number, type, message type or None, repeated)]
_MESSAGES: dict[str, list[tuple[str, int, int, str | None, bool]]] = {
    "XSpace": [
        ("planes", 1, _MSG, "XPlane", True),
        ("errors", 2, _STR, None, True),
        ("warnings", 3, _STR, None, True),
        ("hostnames", 4, _STR, None, True),
    ],
    "XPlane": [
        ("id", 1, _I64, None, False),
        ("name", 2, _STR, None, False),
        ("lines", 3, _MSG, "XLine", True),
        ("event_metadata", 4, _MSG, "XPlane.EventMetadataEntry", True),
        ("stat_metadata", 5, _MSG, "XPlane.StatMetadataEntry", True),
        ("stats", 6, _MSG, "XStat", True),
    ],
    "XLine": [
        ("id", 1, _I64, None, False),
        ("display_id", 10, _I64, None, False),
        ("name", 2, _STR, None, False),
        ("display_name", 11, _STR, None, False),
        ("timestamp_ns", 3, _I64, None, False),
        ("duration_ps", 9, _I64, None, False),
        ("events", 4, _MSG, "XEvent", True),
    ],
    "XEvent": [
        ("metadata_id", 1, _I64, None, False),
        ("offset_ps", 2, _I64, None, False),
        ("num_occurrences", 5, _I64, None, False),
        ("duration_ps", 3, _I64, None, False),
        ("stats", 4, _MSG, "XStat", True),
    ],
    "XStat": [
        ("metadata_id", 1, _I64, None, False),
        ("double_value", 2, _DBL, None, False),
        ("uint64_value", 3, _U64, None, False),
        ("int64_value", 4, _I64, None, False),
        ("str_value", 5, _STR, None, False),
        ("bytes_value", 6, _BYTES, None, False),
        ("ref_value", 7, _U64, None, False),
    ],
    "XEventMetadata": [
        ("id", 1, _I64, None, False),
        ("name", 2, _STR, None, False),
        ("display_name", 4, _STR, None, False),
        ("metadata", 3, _BYTES, None, False),
        ("stats", 5, _MSG, "XStat", True),
        ("child_id", 6, _I64, None, True),
    ],
    "XStatMetadata": [
        ("id", 1, _I64, None, False),
        ("name", 2, _STR, None, False),
        ("description", 3, _STR, None, False),
    ],
}
_ONEOFS = {"XEvent": ("data", ("offset_ps", "num_occurrences")), "XStat": ("value", None)}
_MAPS = {"EventMetadataEntry": "XEventMetadata", "StatMetadataEntry": "XStatMetadata"}


def _add_fields(message: descriptor_pb2.DescriptorProto, package: str, fields, oneof) -> None:
    oneof_members: tuple[str, ...] | None = None
    if oneof is not None:
        message.oneof_decl.add(name=oneof[0])
        oneof_members = oneof[1]
    for name, number, kind, type_name, repeated in fields:
        field = message.field.add(name=name, number=number, type=kind)
        field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
        if type_name:
            field.type_name = f".{package}.{type_name}"
        in_oneof = oneof is not None and (
            (oneof_members is None and name != "metadata_id")
            or (oneof_members is not None and name in oneof_members)
        )
        if in_oneof:
            field.oneof_index = 0


@cache
def messages(variant: str) -> dict[str, Any]:
    """Message classes by name, for variant "full" or "lazy"."""
    package = f"tpumem_xplane_{variant}"
    file = descriptor_pb2.FileDescriptorProto(
        name=f"{package}.proto", package=package, syntax="proto3"
    )
    for name, fields in _MESSAGES.items():
        if variant == "lazy" and name == "XLine":
            fields = [("events", 4, _BYTES, None, True) if f[0] == "events" else f for f in fields]
        message = file.message_type.add(name=name)
        _add_fields(message, package, fields, _ONEOFS.get(name))
        if name == "XPlane":
            for entry_name, value_type in _MAPS.items():
                entry = message.nested_type.add(name=entry_name)
                entry.options.map_entry = True
                key = entry.field.add(name="key", number=1, type=_I64)
                key.label = _F.LABEL_OPTIONAL
                value = entry.field.add(name="value", number=2, type=_MSG)
                value.label = _F.LABEL_OPTIONAL
                value.type_name = f".{package}.{value_type}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
        for name in _MESSAGES
    }
