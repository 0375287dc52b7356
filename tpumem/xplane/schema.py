"""The XSpace protobuf messages, built at run time from their field numbers.

Two variants share the field numbers of TSL's xplane.proto:
- `full`: every message as declared, for writing profiles;
- `lazy`: an XLine's events are kept as raw bytes, so upb parses the planes and
  lines in C and the events (the bulk) are decoded column-wise by tpumem.xplane.wire.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from google.protobuf import descriptor_pb2

from tpumem.protos import BYTES, DBL, I64, MSG, STR, U64, Field, message_classes

_F = descriptor_pb2.FieldDescriptorProto

# message -> [(field, number, type, message type or None, repeated)]
_MESSAGES: dict[str, list[Field]] = {
    "XSpace": [
        ("planes", 1, MSG, "XPlane", True),
        ("errors", 2, STR, None, True),
        ("warnings", 3, STR, None, True),
        ("hostnames", 4, STR, None, True),
    ],
    "XPlane": [
        ("id", 1, I64, None, False),
        ("name", 2, STR, None, False),
        ("lines", 3, MSG, "XLine", True),
        ("event_metadata", 4, MSG, "XPlane.EventMetadataEntry", True),
        ("stat_metadata", 5, MSG, "XPlane.StatMetadataEntry", True),
        ("stats", 6, MSG, "XStat", True),
    ],
    "XLine": [
        ("id", 1, I64, None, False),
        ("display_id", 10, I64, None, False),
        ("name", 2, STR, None, False),
        ("display_name", 11, STR, None, False),
        ("timestamp_ns", 3, I64, None, False),
        ("duration_ps", 9, I64, None, False),
        ("events", 4, MSG, "XEvent", True),
    ],
    "XEvent": [
        ("metadata_id", 1, I64, None, False),
        ("offset_ps", 2, I64, None, False),
        ("num_occurrences", 5, I64, None, False),
        ("duration_ps", 3, I64, None, False),
        ("stats", 4, MSG, "XStat", True),
    ],
    "XStat": [
        ("metadata_id", 1, I64, None, False),
        ("double_value", 2, DBL, None, False),
        ("uint64_value", 3, U64, None, False),
        ("int64_value", 4, I64, None, False),
        ("str_value", 5, STR, None, False),
        ("bytes_value", 6, BYTES, None, False),
        ("ref_value", 7, U64, None, False),
    ],
    "XEventMetadata": [
        ("id", 1, I64, None, False),
        ("name", 2, STR, None, False),
        ("display_name", 4, STR, None, False),
        ("metadata", 3, BYTES, None, False),
        ("stats", 5, MSG, "XStat", True),
        ("child_id", 6, I64, None, True),
    ],
    "XStatMetadata": [
        ("id", 1, I64, None, False),
        ("name", 2, STR, None, False),
        ("description", 3, STR, None, False),
    ],
}
_ONEOFS = {"XEvent": ("data", ("offset_ps", "num_occurrences")), "XStat": ("value", None)}
_MAPS = {"EventMetadataEntry": "XEventMetadata", "StatMetadataEntry": "XStatMetadata"}


@cache
def messages(variant: str) -> dict[str, Any]:
    """Message classes by name, for variant "full" or "lazy"."""
    package = f"tpumem_xplane_{variant}"
    table = dict(_MESSAGES)
    if variant == "lazy":
        table["XLine"] = [
            ("events", 4, BYTES, None, True) if f[0] == "events" else f for f in table["XLine"]
        ]

    def map_entries(name: str, message: descriptor_pb2.DescriptorProto) -> None:
        if name != "XPlane":
            return
        for entry_name, value_type in _MAPS.items():
            entry = message.nested_type.add(name=entry_name)
            entry.options.map_entry = True
            key = entry.field.add(name="key", number=1, type=I64)
            key.label = _F.LABEL_OPTIONAL
            value = entry.field.add(name="value", number=2, type=MSG)
            value.label = _F.LABEL_OPTIONAL
            value.type_name = f".{package}.{value_type}"

    return message_classes(package, table, oneofs=_ONEOFS, extend=map_entries)
