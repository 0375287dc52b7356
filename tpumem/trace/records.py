"""What the JSON records of a trace hold: its metadata (header and patches) and
its compiled-program rows. A trace comes from another process, another version or
another tool, so what the analysis reads is checked here, once: a field of the
wrong kind is dropped, with a warning naming it, and the rest of the record stands.
Fields not described are kept as they are and read by nothing.
"""

from __future__ import annotations

import json
import math
from typing import Any

INT_LIMIT = 1 << 63  # what an int64 column, numpy and the report's arithmetic hold
_MISSING = object()


class _Kind:
    def __init__(self, name: str, test: Any) -> None:
        self.name, self.test = name, test

    def __repr__(self) -> str:
        return self.name


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -INT_LIMIT < value < INT_LIMIT


def _is_number(value: object) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)  # type: ignore[arg-type]


INT = _Kind("an integer", _is_int)
NUMBER = _Kind("a finite number", _is_number)
TEXT = _Kind("a string", lambda v: isinstance(v, str))
FLAG = _Kind("true or false", lambda v: isinstance(v, bool))
SCALAR = _Kind("a string or number", lambda v: isinstance(v, str) or _is_number(v) or v is None)


class ListOf:
    def __init__(self, item: Any) -> None:
        self.item = item


class MapOf:
    """A JSON object whose every value is `value` (names chosen by the writer)."""

    def __init__(self, value: Any) -> None:
        self.value = value


# Environment variables that decide how much a framework reserves up front: a
# profiled run's metadata records those set (`env`).
SETTINGS_VARIABLES = (
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_CPU_ALLOCATOR_USE_BFC",
    "TF_CPU_BFC_MEM_LIMIT_IN_MB",
    "TF_GPU_ALLOCATOR",
    "TF_GPU_HOST_MEM_LIMIT_IN_MB",
    "PJRT_DEVICE",
)

# A dict here describes a JSON object field by field.
METADATA: dict[str, Any] = {
    "format": TEXT,
    "format_version": INT,
    "framework": TEXT,
    "framework_version": TEXT,
    "backend": TEXT,
    "source": TEXT,
    "host": TEXT,
    "run": TEXT,
    "imported_from": TEXT,
    "start_time_ns": INT,
    "end_time_ns": INT,
    "command": ListOf(TEXT),
    "warnings": ListOf(TEXT),
    "not_exposed": ListOf(TEXT),
    "exit": {"code": INT, "signal": INT, "signal_name": TEXT, "exception": TEXT},
    "capture": {
        "chunks": INT,
        "chunk_s": NUMBER,
        "sessions_overrun": INT,
        "longest_session_ns": INT,
        "gaps": INT,
        "gap_total_ns": INT,
        "gap_max_ns": INT,
        "covered_fraction": NUMBER,
    },
    "buffer_book": {  # the counts a report shows; the adapters add their own notes
        "arrays_entered": INT,
        "arrays_found_by_poll": INT,
        "arrays_donated": INT,
        "shard_arrays_listed": INT,
        "tensors_seen": INT,
        "tensors_transferred": INT,
        "tensors_materialized_by_graphs": INT,
        "buffers_replaced_in_place": INT,
        "executions_observed": INT,
        "executions_not_observed": INT,
        "program_temp_shown": FLAG,
    },
    "set_by_tpumem": MapOf(TEXT),
    "env": MapOf(TEXT),
    "allocator_settings": MapOf(SCALAR),
    "devices": ListOf({"name": TEXT, "kind": TEXT, "capacity_bytes": INT}),
    "fidelity": MapOf(TEXT),
}

PROGRAM: dict[str, Any] = {
    "name": TEXT,
    "devices": ListOf(TEXT),
    "argument_bytes": INT,
    "output_bytes": INT,
    "alias_bytes": INT,
    "temp_bytes": INT,
    "generated_code_bytes": INT,
    "unavailable": TEXT,
}


def _describe(spec: Any) -> str:
    if isinstance(spec, ListOf):
        return "a list"
    if isinstance(spec, dict | MapOf):
        return "an object"
    return repr(spec)


def conform(value: Any, spec: Any, where: str, dropped: list[str]) -> Any:
    """`value` with what does not match `spec` left out; `_MISSING` when nothing
    of it does. Appends the name of each field left out to `dropped`."""
    if isinstance(spec, _Kind):
        if spec.test(value):
            return value
    elif isinstance(spec, ListOf) and isinstance(value, list):
        kept = [conform(item, spec.item, f"{where}[{i}]", dropped) for i, item in enumerate(value)]
        return [item for item in kept if item is not _MISSING]
    elif isinstance(spec, MapOf) and isinstance(value, dict):
        kept = {k: conform(v, spec.value, f"{where}.{k}", dropped) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v is not _MISSING}
    elif isinstance(spec, dict) and isinstance(value, dict):
        kept = {
            k: conform(v, spec[k], f"{where}.{k}" if where else k, dropped) if k in spec else v
            for k, v in value.items()
        }
        return {k: v for k, v in kept.items() if v is not _MISSING}
    dropped.append(f"{where} (not {_describe(spec)})")
    return _MISSING


def merge_metadata(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """A metadata patch over what came before: it replaces keys, except `warnings`,
    which accumulate."""
    merged = {**base, **patch}
    if "warnings" in patch:
        merged["warnings"] = [*_list(base.get("warnings")), *_list(patch["warnings"])]
    return merged


def _list(value: object) -> list:
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
