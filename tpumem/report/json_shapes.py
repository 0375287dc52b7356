"""One way tpumem writes JSON, and its schemas from the same declarations.

A JSON form is declared once, as a `Shape`: an object's keys, each with what it
reads from the value written and the shape of what it reads. The same shape
writes the JSON (`write`) and its JSON Schema (`schema`), so a key written is a
key the schema describes, with the type it is written with: the schema files in
tpumem/report/schemas/ are generated from the shapes (`python -m
tpumem.report.schema_files`) and a test fails when they differ.

Keys are named in the shapes, each one: a report's readers are other programs,
and a field the analysis gains or renames must not add or rename a key unseen.
Where a key is the field of the same name, `fields` reads the field's type from
the dataclass, so the type is declared once too. A key added to a published
schema is declared `optional`: a report written before it lacks it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Schema = dict[str, Any]


class Shape:
    """What a JSON value is: how to write one and how to describe it."""

    # Written as it is (a number, a string, null): an array of them is copied
    # whole, not item by item (a page's series hold a million numbers).
    plain = False

    def write(self, value: Any) -> Any:
        return value

    def schema(self) -> Schema:
        raise NotImplementedError


@dataclass(frozen=True, slots=True)
class Scalar(Shape):
    json_type: str  # "integer", "number", "string", "boolean", "null"
    values: tuple[Any, ...] = ()  # the only values it takes, where it has a few
    plain = True

    def schema(self) -> Schema:
        if self.values:
            return {"enum": list(self.values)}
        return {"type": self.json_type}


INT = Scalar("integer")
NUMBER = Scalar("number")
STRING = Scalar("string")
BOOL = Scalar("boolean")


class AnyValue(Shape):
    """A value kept as it came (a trace's metadata fields tpumem does not know)."""

    plain = True

    def schema(self) -> Schema:
        return {}


ANY = AnyValue()


def one_of(*values: Any) -> Scalar:
    """A string (or other scalar) that takes only these values."""
    return Scalar("string", tuple(values))


@dataclass(frozen=True, slots=True)
class Const(Shape):
    value: Any

    def write(self, value: Any) -> Any:
        return self.value

    def schema(self) -> Schema:
        return {"const": self.value}


@dataclass(frozen=True, slots=True)
class Optional(Shape):
    """The shape, or null."""

    inner: Shape

    @property
    def plain(self) -> bool:  # type: ignore[override]
        return self.inner.plain

    def write(self, value: Any) -> Any:
        return None if value is None else self.inner.write(value)

    def schema(self) -> Schema:
        if isinstance(self.inner, Scalar) and self.inner.values:
            return {"enum": [*self.inner.values, None]}
        return {"anyOf": [self.inner.schema(), {"type": "null"}]}


@dataclass(frozen=True, slots=True)
class Array(Shape):
    item: Shape

    def write(self, value: Any) -> Any:
        if self.item.plain:
            return list(value)
        return [self.item.write(item) for item in value]

    def schema(self) -> Schema:
        return {"type": "array", "items": self.item.schema()}


@dataclass(frozen=True, slots=True)
class Fixed(Shape):
    """An array of a fixed length, each place its own shape (a Python tuple)."""

    items: tuple[Shape, ...]
    # Each place written as it is: the tuple is copied whole (decided once).
    _copied: bool = dataclasses.field(init=False, default=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_copied", all(shape.plain for shape in self.items))

    def write(self, value: Any) -> Any:
        if self._copied:
            return list(value)
        return [shape.write(item) for shape, item in zip(self.items, value, strict=True)]

    def schema(self) -> Schema:
        return {
            "type": "array",
            "prefixItems": [shape.schema() for shape in self.items],
            "items": False,
            "minItems": len(self.items),
        }


@dataclass(frozen=True, slots=True)
class Table(Shape):
    """An object whose keys are data (names), each value of one shape."""

    value: Shape

    def write(self, value: Any) -> Any:
        return {str(key): self.value.write(item) for key, item in value.items()}

    def schema(self) -> Schema:
        return {"type": "object", "additionalProperties": self.value.schema()}


@dataclass(frozen=True, slots=True)
class Key:
    """One key of an object: its name, its shape, and what it reads from the value
    the object is written from."""

    name: str
    shape: Shape
    read: Callable[[Any], Any]
    about: str = ""  # the schema's description
    # Readers may meet reports without it (written before it was added).
    optional: bool = False


@dataclass(frozen=True, slots=True)
class Object(Shape):
    keys: tuple[Key, ...]
    about: str = ""
    title: str = ""
    # Keys a report may carry beyond these (a trace's metadata keeps the fields
    # of other versions of tpumem as they came).
    others: Shape | None = None

    def write(self, value: Any) -> Any:
        return {key.name: key.shape.write(key.read(value)) for key in self.keys}

    def schema(self) -> Schema:
        body: Schema = {"type": "object"}
        if self.title:
            body["title"] = self.title
        if self.about:
            body["description"] = self.about
        properties = {}
        for key in self.keys:
            described = key.shape.schema()
            properties[key.name] = (
                {**described, "description": key.about} if key.about else described
            )
        body["properties"] = properties
        body["required"] = [key.name for key in self.keys if not key.optional]
        body["additionalProperties"] = False if self.others is None else self.others.schema()
        return body

    def extended(self, *keys: Key) -> Object:
        return dataclasses.replace(self, keys=(*self.keys, *keys))

    def without(self, *names: str) -> Object:
        return dataclasses.replace(self, keys=tuple(k for k in self.keys if k.name not in names))


@dataclass(frozen=True, slots=True)
class Written(Shape):
    """A shape whose writing is the value's own (a trace's metadata, which writes
    its JSON itself for the trace file) or a function's, described by `described`."""

    described: Shape
    writer: Callable[[Any], Any]

    def write(self, value: Any) -> Any:
        return self.writer(value)

    def schema(self) -> Schema:
        return self.described.schema()


def attribute(name: str) -> Callable[[Any], Any]:
    return lambda value: getattr(value, name)


def item(index: int) -> Callable[[Any], Any]:
    """A reader of a tuple's item (a key read from a row of a tuple)."""
    return lambda value: value[index]


def key(
    name: str,
    shape: Shape,
    read: Callable[[Any], Any] | str | None = None,
    about: str = "",
    optional: bool = False,
) -> Key:
    """A key reading `read` (a function, or an attribute's name; by default the
    attribute of the key's own name)."""
    reader = attribute(name if read is None else read) if not callable(read) else read
    return Key(name, shape, reader, about, optional)


def fields(
    cls: type,
    *names: str,
    about: Mapping[str, str] | None = None,
    shapes: Mapping[str, Shape] | None = None,
    optional: Sequence[str] = (),
) -> tuple[Key, ...]:
    """Keys for fields of dataclass `cls` (or its properties), each named as the
    field, its shape from the field's type (or `shapes`). Each is named: a field
    the analysis gains is no key until it is written here."""
    if not names:
        raise TypeError(f"name the fields of {cls.__name__} that the JSON writes")
    hints = _hints(cls)
    about = about or {}
    shapes = shapes or {}
    return tuple(
        key(
            name,
            shapes[name] if name in shapes else shape_of(hints[name]),
            about=about.get(name, ""),
            optional=name in optional,
        )
        for name in names
    )


def _hints(cls: type) -> dict[str, Any]:
    """The types of a dataclass' fields, and of its properties (their returns)."""
    found = typing.get_type_hints(cls)
    for name, value in vars(cls).items():
        if isinstance(value, property) and value.fget is not None:
            found[name] = typing.get_type_hints(value.fget)["return"]
    return found


def record(
    cls: type,
    *names: str,
    about: Mapping[str, str] | None = None,
    shapes: Mapping[str, Shape] | None = None,
    optional: Sequence[str] = (),
) -> Object:
    """An object of dataclass `cls`'s fields `names` (`about`: a key's
    description; `optional`: the keys a report written before them lacks)."""
    return Object(fields(cls, *names, about=about, shapes=shapes, optional=optional))


# The shapes of dataclasses written whole, found by `shape_of` for a field of
# their type. Declared by `register`.
_RECORDS: dict[type, Shape] = {}


def register(cls: type, shape: Shape) -> Shape:
    _RECORDS[cls] = shape
    return shape


def shape_of(hint: Any, records: Callable[[type], Shape] | None = None) -> Shape:
    """The shape of a value of a Python type: scalars, `X | None`, tuples, lists,
    mappings, and dataclasses (`records`' shape of them: by default the one
    registered)."""
    records = records or _record_of
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if hint is Any:
        return ANY
    if origin in (types.UnionType, typing.Union):
        rest = [a for a in arguments if a is not type(None)]
        inner = shape_of(rest[0], records) if len(rest) == 1 else _union(rest, records)
        return Optional(inner) if len(rest) < len(arguments) else inner
    if origin is typing.Literal:
        return Scalar("string", arguments)
    if origin is tuple:
        if len(arguments) == 2 and arguments[1] is Ellipsis:
            return Array(shape_of(arguments[0], records))
        return Fixed(tuple(shape_of(a, records) for a in arguments))
    if origin is list or _is(origin, Sequence):
        return Array(shape_of(arguments[0], records))
    if origin is dict or _is(origin, Mapping):
        return Table(shape_of(arguments[1], records))
    if hint in _SCALARS:
        return _SCALARS[hint]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return records(hint)
    raise TypeError(f"no JSON shape for {hint!r}")


def _record_of(cls: type) -> Shape:
    shape = _RECORDS.get(cls)
    if shape is None:
        raise TypeError(f"no JSON shape registered for {cls.__name__}")
    return shape


def encoded_record(cls: type, required: Sequence[str] = (), other: str = "other") -> Object:
    """The shape of a record as the trace's files write it (trace/records.py's
    `encode`): a field that is None is left out, not null, and the fields of
    `other` (what another version of tpumem wrote) stand beside. Only `required`
    is: a trace of another version of tpumem may lack any other field."""
    hints = typing.get_type_hints(cls)
    keys = []
    kept_apart = False
    for f in dataclasses.fields(cls):
        if f.name == other:
            kept_apart = True
            continue
        shape = shape_of(hints[f.name], encoded_record)
        inner = shape.inner if isinstance(shape, Optional) else shape
        keys.append(key(f.name, inner, optional=f.name not in required))
    return Object(tuple(keys), others=ANY if kept_apart else None)


def _union(hints: list[Any], records: Callable[[type], Shape]) -> Shape:
    return AnyOf(tuple(shape_of(h, records) for h in hints))


@dataclass(frozen=True, slots=True)
class AnyOf(Shape):
    """One of several shapes (written as it comes: only its writer knows which)."""

    shapes: tuple[Shape, ...]

    def schema(self) -> Schema:
        return {"anyOf": [shape.schema() for shape in self.shapes]}


def _is(origin: Any, abstract: type) -> bool:
    return isinstance(origin, type) and issubclass(origin, abstract)


# (bool before int: True is an int to Python, not to JSON.)
_SCALARS: dict[Any, Shape] = {
    bool: BOOL,
    int: INT,
    float: NUMBER,
    str: STRING,
    type(None): Scalar("null"),
}


@dataclass(frozen=True, slots=True)
class Named(Shape):
    """A shape several keys share, described once in the schema file's `$defs`
    and referred to by name."""

    name: str
    shape: Shape

    def write(self, value: Any) -> Any:
        return self.shape.write(value)

    def schema(self) -> Schema:
        if _DEFINITIONS is not None and self.name not in _DEFINITIONS:
            _DEFINITIONS[self.name] = {}  # (taken first: a shape may hold itself)
            _DEFINITIONS[self.name] = self.shape.schema()
        return {"$ref": f"#/$defs/{self.name}"} if _DEFINITIONS is not None else self.shape.schema()


# The `$defs` of the schema file being generated (None outside `document`).
_DEFINITIONS: dict[str, Schema] | None = None


def document(shape: Shape, schema_id: str, title: str) -> Schema:
    """A whole schema file: the shape's schema under its id, with the shapes its
    keys share under `$defs`."""
    global _DEFINITIONS
    _DEFINITIONS = {}
    try:
        body = shape.schema()
        definitions = dict(sorted(_DEFINITIONS.items()))
    finally:
        _DEFINITIONS = None
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": schema_id,
        "title": title,
        **{k: v for k, v in body.items() if k != "title"},
        **({"$defs": definitions} if definitions else {}),
    }


@dataclass(frozen=True, slots=True)
class Reference(Shape):
    """A document described by another schema file (a comparison's runs are
    reports): written by that shape, referred to by id, never copied."""

    shape: Shape
    ref: str

    def write(self, value: Any) -> Any:
        return self.shape.write(value)

    def schema(self) -> Schema:
        return {"$ref": self.ref}
