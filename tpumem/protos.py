"""Protobuf message classes built at run time from a table of field numbers.

tpumem reads other tools' protobufs (TSL's XSpace, XLA's HloProto) without their
generated code: each reader declares the fields it needs, by number, and upb parses
them in C. Fields a table leaves out are skipped on the wire; enums are read as
the integers they are on the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_F = descriptor_pb2.FieldDescriptorProto
I32, I64, U64, BOOL, DBL, STR, BYTES, MSG = (
    _F.TYPE_INT32,
    _F.TYPE_INT64,
    _F.TYPE_UINT64,
    _F.TYPE_BOOL,
    _F.TYPE_DOUBLE,
    _F.TYPE_STRING,
    _F.TYPE_BYTES,
    _F.TYPE_MESSAGE,
)

# (field, number, type, message type or None, repeated)
Field = tuple[str, int, int, str | None, bool]


def add_fields(
    message: descriptor_pb2.DescriptorProto,
    package: str,
    fields: Sequence[Field],
    oneof: tuple[str, tuple[str, ...] | None] | None = None,
) -> None:
    """Declares `fields` on `message`. `oneof`: (name, members), members None for
    every field but `metadata_id` (XStat's value)."""
    if oneof is not None:
        message.oneof_decl.add(name=oneof[0])
    for name, number, kind, type_name, repeated in fields:
        field = message.field.add(name=name, number=number, type=kind)
        field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
        if type_name:
            field.type_name = f".{package}.{type_name}"
        if oneof is not None:
            members = oneof[1]
            if (members is None and name != "metadata_id") or (members and name in members):
                field.oneof_index = 0


def message_classes(
    package: str,
    table: Mapping[str, Sequence[Field]],
    *,
    oneofs: Mapping[str, tuple[str, tuple[str, ...] | None]] | None = None,
    extend: Callable[[str, descriptor_pb2.DescriptorProto], None] | None = None,
) -> dict[str, Any]:
    """Message classes by name. Names with dots ("A.B") are nested in "A";
    `extend(name, message)` may add to a message (map entries) before it is built."""
    file = descriptor_pb2.FileDescriptorProto(
        name=f"{package}.proto", package=package, syntax="proto3"
    )
    made: dict[str, descriptor_pb2.DescriptorProto] = {}
    for name, fields in table.items():
        outer, _, inner = name.rpartition(".")
        message = (made[outer].nested_type if outer else file.message_type).add(name=inner or name)
        made[name] = message
        add_fields(message, package, fields, (oneofs or {}).get(name))
        if extend is not None:
            extend(name, message)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
        for name in table
    }
