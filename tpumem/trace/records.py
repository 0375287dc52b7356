"""How the JSON records of a trace (its metadata and its compiled-program rows) turn
into typed values and back. A record's type is a frozen dataclass; its fields' type
hints are the one description of what the record may hold.

A trace comes from another process, another version or another tool, so reading
checks every field against its hint, once: a field of the wrong kind is dropped,
with a warning naming it, and the rest of the record stands. Writing is the reverse:
a dataclass becomes a JSON object of its fields that are not None.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import types
import typing
from collections.abc import Collection, Mapping
from typing import Any, TypeVar

INT_LIMIT = 1 << 63  # what an int64 column, numpy and the report's arithmetic hold
_MISSING = object()
# A record class may keep the fields it does not describe in a field of this name
# (the metadata does: newer writers and other tools add their own).
OTHER = "other"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -INT_LIMIT < value < INT_LIMIT


def _is_number(value: object) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)  # type: ignore[arg-type]


# What a JSON value of each scalar type must be, in words and as a test (the
# summaries beside traces are read by the same rules: reading/plain_json.py).
SCALARS: dict[Any, tuple[str, Any]] = {
    int: ("an integer", _is_int),
    float: ("a finite number", _is_number),
    str: ("a string", lambda v: isinstance(v, str)),
    bool: ("true or false", lambda v: isinstance(v, bool)),
}


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    """A record class's fields and their types, resolved once."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in typing.get_type_hints(cls).items() if k in names}


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if hint in SCALARS:
        return SCALARS[hint][0]
    if origin is tuple:
        return "a list"
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_describe(a) for a in typing.get_args(hint) if a is not type(None))
    return "an object"


def decode(hint: Any, value: Any, where: str, dropped: list[str]) -> Any:
    """`value` as `hint` describes it, with what does not match left out; `_MISSING`
    when nothing of it does. Appends the name of each field left out to `dropped`."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        choices = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None and len(choices) < len(typing.get_args(hint)):
            return None
        for choice in choices:
            tried: list[str] = []
            found = decode(choice, value, where, tried)
            if found is not _MISSING:
                dropped += tried
                return found
    elif hint in SCALARS:
        if SCALARS[hint][1](value):
            return value
    elif origin is tuple and isinstance(value, list):
        (item,) = (a for a in typing.get_args(hint) if a is not Ellipsis)
        kept = (decode(item, v, f"{where}[{i}]", dropped) for i, v in enumerate(value))
        return tuple(v for v in kept if v is not _MISSING)
    elif origin in (Mapping, dict) and isinstance(value, dict):
        item = typing.get_args(hint)[1]
        decoded = {k: decode(item, v, f"{where}.{k}", dropped) for k, v in value.items()}
        return {k: v for k, v in decoded.items() if v is not _MISSING}
    elif isinstance(hint, type) and dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return decode_record(hint, value, where, dropped)
    dropped.append(f"{where} (not {_describe(hint)})")
    return _MISSING


def decode_record(cls: type, value: Mapping[str, Any], where: str, dropped: list[str]) -> Any:
    """A record of class `cls` from a JSON object: fields that do not match are left
    out (their defaults stand); fields the class does not describe go to its `other`
    field where it has one, and are ignored where not."""
    fields, known, other = hints(cls), {}, {}
    for name, item in value.items():
        if name in fields and name != OTHER:
            found = decode(fields[name], item, f"{where}.{name}" if where else name, dropped)
            if found is not _MISSING:
                known[name] = found
        else:
            other[name] = item
    if OTHER in fields:
        known[OTHER] = other
    return cls(**known)


def encode(value: Any) -> Any:
    """A record, or anything holding records, as JSON values: a record's fields that
    are None are left out, and its `other` fields stand beside its own."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        body: dict[str, Any] = {}
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if field.name == OTHER:
                body = {**item, **body}
            elif item is not None:
                body[field.name] = encode(item)
        return body
    if isinstance(value, tuple | list):
        return [encode(item) for item in value]
    if isinstance(value, Mapping):
        return {key: encode(item) for key, item in value.items()}
    return value


@dataclasses.dataclass(frozen=True, slots=True)
class ProgramRecord:
    """A compiled program's memory, as XLA's own analysis gave it (a `program` row)."""

    name: str = "?"
    module: str | None = None  # the HLO module's name, which its `hlo` row carries too
    devices: tuple[str, ...] = ()
    argument_bytes: int | None = None
    output_bytes: int | None = None
    alias_bytes: int | None = None
    temp_bytes: int | None = None
    generated_code_bytes: int | None = None
    unavailable: str | None = None  # why the backend gave no analysis
    precision_bytes: int | None = None  # the sizes were printed rounded to this


def merge_metadata(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A metadata patch over what came before: it replaces keys, except `warnings`,
    which accumulate."""
    merged = {**base, **patch}
    if "warnings" in patch:
        merged["warnings"] = [*_list(base.get("warnings")), *_list(patch["warnings"])]
    return merged


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def parse_object(text: object) -> dict[str, Any] | None:
    """A JSON object from a trace's text; None for anything else (a row cut short,
    another tool's text, nesting deeper than Python parses)."""
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


DROPPED = "ignored what a tpumem trace does not hold there"


def dropped_warning(what: str, dropped: list[str]) -> str:
    shown = ", ".join(dropped[:5]) + (f" and {len(dropped) - 5} more" if len(dropped) > 5 else "")
    return f"{what}: {DROPPED}: {shown}"


R = TypeVar("R")


def filled_since(
    declared: R | None, written: R | None, keys: Collection[str], added: Collection[str]
) -> R | None:
    """A record of facts an adapter declares (its allocator's settings, its users'
    words) as a trace holds it: as the framework declared it before adapters
    wrote it (`declared`) where the trace holds none; and where it holds one, each
    fact `added` since that its writer did not write (`keys`: those it wrote) as
    declared then. Only those: a writer leaves a None out, so a fact written from
    the start and absent is one the adapter declared None, which must read as None."""
    if written is None or declared is None:
        return written if written is not None else declared
    missing = {
        name: getattr(declared, name)
        for name in added
        if name not in keys and getattr(declared, name) is not None
    }
    return dataclasses.replace(written, **missing) if missing else written  # type: ignore[type-var]
