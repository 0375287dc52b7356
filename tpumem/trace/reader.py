"""Loads a trace file, refusing what is not one and keeping what a cut file holds."""

from __future__ import annotations

import json
import mmap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tpumem.errors import TpumemError
from tpumem.trace.model import Trace
from tpumem.trace.schema import (
    END_OF_STREAM,
    FORMAT_NAME,
    FORMAT_VERSION,
    META,
    METADATA_KEY,
    SCHEMA,
)


def merge_metadata(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Patches replace keys, except `warnings`, which accumulate."""
    merged = {**base, **patch}
    if "warnings" in patch:
        merged["warnings"] = [*base.get("warnings", []), *patch["warnings"]]
    return merged


def _header(schema: pa.Schema, path: str) -> dict[str, Any]:
    raw = (schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise TpumemError(f"{path}: an Arrow stream, but not a tpumem trace")
    try:
        header = json.loads(raw)
    except ValueError:
        raise TpumemError(f"{path}: the trace header is not valid JSON") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
        raise TpumemError(f"{path}: not a tpumem trace")
    version = header.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise TpumemError(
            f"{path}: trace format version {version} is newer than this tpumem reads "
            f"({FORMAT_VERSION}); upgrade tpumem"
        )
    return header


def _conform(table: pa.Table) -> pa.Table:
    """Adds columns an older writer did not have (as nulls), drops unknown ones."""
    columns = []
    for field in SCHEMA:
        if field.name in table.column_names:
            columns.append(table.column(field.name))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def load(path: str | Path) -> Trace:
    """Reads a trace. A file cut short (its writer was killed) loads up to the last
    whole record batch and says so in its warnings."""
    name = str(path)
    file = Path(path)
    if not file.exists():
        raise TpumemError(f"{name}: no such file")
    if file.is_dir():
        raise TpumemError(f"{name}: is a directory, not a trace file")
    if file.stat().st_size == 0:
        raise TpumemError(f"{name}: empty file, not a tpumem trace")
    # Python's mmap, not Arrow's: its pages can be given back once read (Trace).
    with open(name, "rb") as handle:
        mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    source = pa.BufferReader(pa.py_buffer(mapping))
    try:
        reader = pa.ipc.open_stream(source)
    except (pa.ArrowInvalid, OSError) as error:
        if source.size() >= 4 and mapping[:4] == b"\xff\xff\xff\xff":
            raise TpumemError(f"{name}: truncated before the end of its header") from error
        raise TpumemError(f"{name}: not a tpumem trace (not an Arrow stream)") from error
    header = _header(reader.schema, name)
    batches = []
    cut = False
    while True:
        try:
            batches.append(reader.read_next_batch())
        except StopIteration:
            break
        except (pa.ArrowInvalid, OSError):
            cut = True
            break
    table = _conform(pa.Table.from_batches(batches, schema=reader.schema))
    metadata = header
    if table.num_rows:
        patches = table.filter(pc.equal(table.column("kind").cast(pa.string()), META))
        for text in patches.column("text").to_pylist():
            metadata = merge_metadata(metadata, json.loads(text))
    complete = not cut and mapping[-len(END_OF_STREAM) :] == END_OF_STREAM
    if not complete:
        metadata = merge_metadata(
            metadata,
            {
                "warnings": [
                    f"the trace was not closed by its writer (the process crashed or was "
                    f"killed); loaded the {table.num_rows:,} rows written before that"
                ]
            },
        )
    return Trace(path=name, metadata=metadata, table=table, complete=complete, mapping=mapping)
