"""Adds rows to a finished trace: a metadata patch to one whose writer may have
died, or what was learned after the run (`--tpu`'s compiles).

When a profiled process is killed (SIGKILL, the OOM killer), its trace ends
wherever the kernel stopped it, perhaps inside a record batch. `tpumem profile`
then records how the run ended from outside: the file is cut back to its last
whole message (nothing readable is lost) and a patch row and an end-of-stream
marker are appended.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from tpumem.errors import TpumemError
from tpumem.trace.columns import rows_to_batch
from tpumem.trace.metadata import metadata_json
from tpumem.trace.schema import END_OF_STREAM, META


def _message_ends(data: pa.Buffer) -> list[int]:
    """Byte offsets at which each whole IPC message of a stream ends."""
    source = pa.BufferReader(data)
    reader = pa.ipc.MessageReader.open_stream(source)
    ends: list[int] = []
    while True:
        try:
            reader.read_next_message()
        except StopIteration:
            return ends
        except (pa.ArrowInvalid, OSError):
            return ends  # the rest was cut
        ends.append(source.tell())


def rows_tail(schema: pa.Schema, rows: list[dict[str, Any]]) -> bytes:
    """The messages that end a stream of `schema` with `rows`: their dictionaries,
    their batch and the end-of-stream marker."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(rows_to_batch(rows))
    tail = sink.getvalue()
    return bytes(tail.slice(_message_ends(tail)[0]).to_pybytes())


def metadata_tail(schema: pa.Schema, patch: dict[str, Any], time_ns: int) -> bytes:
    """The messages that end a stream of `schema` with `patch` as a metadata row."""
    return rows_tail(schema, [{"kind": META, "time_ns": time_ns, "text": json.dumps(patch)}])


def append_rows(path: str | Path, rows: list[dict[str, Any]], cut: bool = False) -> bool:
    """Appends `rows` (kind, time_ns, text, ...) after the trace's last whole
    message, and ends the stream again; False when the file does not even hold a
    whole schema (nothing a reader could load). OSError when the file cannot be
    read or written.

    Only `cut` (the trace of a run just killed, ended from outside) lets it drop
    what follows the last whole message: a message the kill left half written.
    Anything else that follows (damage, and perhaps rows after it) is the user's
    and stays: TpumemError, and the file is not touched."""
    schema, end, whole = _last_message(path)
    if schema is None:
        return False
    if not (cut or whole):
        raise _not_whole(path, end)
    with open(path, "r+b") as handle:
        handle.truncate(end)
        handle.seek(end)
        handle.write(rows_tail(schema, rows))
    return True


def check_whole(path: str | Path) -> None:
    """TpumemError unless the trace is whole: every message readable, and the
    end-of-stream marker after the last (its writer closed it). append_rows adds
    only to such a trace, or ends a killed run's."""
    schema, end, whole = _last_message(path)
    if schema is not None and not whole:
        raise _not_whole(path, end)


def _not_whole(path: str | Path, end: int) -> TpumemError:
    return TpumemError(
        f"{path}: damaged, cut or still being written after its first {end:,} bytes; "
        "nothing added, nothing changed"
    )


def _last_message(path: str | Path) -> tuple[pa.Schema | None, int, bool]:
    """(the stream's schema, None where not even that is whole; the offset where
    its last whole message ends; whether the end marker, and only it, follows)."""
    with pa.memory_map(str(path)) as source:
        data = source.read_buffer()
        ends = _message_ends(data)
        if not ends:
            return None, 0, False
        schema = pa.ipc.read_schema(pa.BufferReader(data.slice(0, ends[0])))
        rest = data.slice(ends[-1]).to_pybytes() if data.size - ends[-1] <= 8 else None
        del data  # (the map closes before anyone writes the file)
    return schema, ends[-1], rest == END_OF_STREAM


def append_metadata(path: str | Path, time_ns: int = 0, **fields: Any) -> bool:
    """Appends metadata `fields` (TraceMetadata's, typed, as the writer's
    patch_metadata takes them) as a row at `time_ns` on the trace clock: the
    launcher's record of how a run ended, so a half-written last message is cut."""
    row = {"kind": META, "time_ns": time_ns, "text": json.dumps(metadata_json(fields))}
    return append_rows(path, [row], cut=True)
