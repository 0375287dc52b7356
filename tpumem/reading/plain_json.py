"""Frozen dataclasses of plain values to JSON and back, checked on the way back.

What is read back is untrusted (a summary file anyone may have edited), so every
value must have its field's declared type: ints are not bools, tuples hold what
they declare, a nested dataclass has every field it needs and no other. The
types are read from the classes' own annotations, so a field added to a summary
is written and read with no code here.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import cache
from typing import Any, TypeVar

from tpumem.trace.records import SCALARS

T = TypeVar("T")


class Unreadable(ValueError):
    """What is wrong with a value, and where in it (`at`)."""


def to_plain(value: Any) -> Any:
    """The value as JSON's types: a dataclass as an object of its fields, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_plain(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        return value.item()  # (a numpy scalar, as the analysis' arrays give them)
    return value


def from_plain(kind: type[T], value: Any) -> T:
    """`value` (as json.loads gives it) as a `kind`; Unreadable where it is not one."""
    read: T = _read(kind, value, kind.__name__)
    return read


@cache
def _hints(kind: type) -> dict[str, Any]:
    return typing.get_type_hints(kind)


def _read(kind: Any, value: Any, at: str) -> Any:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        given = [option for option in options if option is not type(None)]
        if len(given) == 1:  # (X or null: what is wrong with it as an X says more)
            return _read(given[0], value, at)
        for option in options:
            if option is type(None):
                continue
            try:
                return _read(option, value, at)
            except Unreadable:
                continue
        raise Unreadable(f"{at}: {_shown(value)} is not {_words(kind)}")
    if origin is tuple:
        if not isinstance(value, list):
            raise Unreadable(f"{at}: {_shown(value)} is not a list")
        item_kind, *rest = typing.get_args(kind)
        if rest != [Ellipsis]:  # (a summary holds tuples of one kind of item only)
            raise Unreadable(f"{at}: no reading for {kind}")
        if item_kind in SCALARS:  # (a line's points: read in one pass, not one by one)
            return _scalars(item_kind, value, at)
        return tuple(_read(item_kind, item, f"{at}[{i}]") for i, item in enumerate(value))
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _dataclass(kind, value, at)
    if kind in SCALARS:
        words, holds = SCALARS[kind]
        if holds(value):
            return float(value) if kind is float else value
        raise Unreadable(f"{at}: {_shown(value)} is not {words}")
    raise Unreadable(f"{at}: no reading for {kind}")


def _scalars(kind: type, value: list[Any], at: str) -> tuple[Any, ...]:
    words, holds = SCALARS[kind]
    for i, item in enumerate(value):
        if not holds(item):
            raise Unreadable(f"{at}[{i}]: {_shown(item)} is not {words}")
    return tuple(float(item) for item in value) if kind is float else tuple(value)


def _dataclass(kind: type, value: Any, at: str) -> Any:
    if not isinstance(value, dict):
        raise Unreadable(f"{at}: {_shown(value)} is not an object")
    fields = {f.name: f for f in dataclasses.fields(kind)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise Unreadable(f"{at}: no field {unknown[0]!r}")
    hints = _hints(kind)
    given = {}
    for name, field in fields.items():
        if name in value:
            given[name] = _read(hints[name], value[name], f"{at}.{name}")
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise Unreadable(f"{at}: field {name!r} is missing")
    return kind(**given)


def _words(kind: Any) -> str:
    """What a union of types asks for, as the unreadable line says it."""
    names = [
        SCALARS[a][0] if a in SCALARS else f"a {getattr(a, '__name__', a)}"
        for a in typing.get_args(kind)
        if a is not type(None)
    ]
    return " or ".join(names) + (" or null" if type(None) in typing.get_args(kind) else "")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
