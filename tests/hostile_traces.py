"""Hand-built traces a careless or hostile writer could leave: each breaks one rule
of the format (tpumem/trace/schema.py) that a mutated byte rarely hits."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from hlo_builder import hlo_proto
from tpumem.hlo.schema import ALLOC, FREE
from tpumem.trace.columns import rows_to_batch
from tpumem.trace.hlo_rows import hlo_row_text
from tpumem.trace.schema import SCHEMA

ESCAPES = "\x1b]0;pwned\x07\x1b[2J\x9b31m"
MARKUP = "[bold red]markup[/] [link=file:///etc/passwd]x[/link]"
HTML = "<script>alert(1)</script><img src=x onerror=alert(2)>"


def _rows(device: str = "GPU:0", op: str = "dot", count: int = 4) -> list[dict]:
    rows = []
    for i in range(count):
        rows.append(
            {
                "kind": "alloc",
                "time_ns": 10 * i,
                "device": device,
                "buffer_id": i,
                "address": 4096 * i,
                "bytes": 1024 * (i + 1),
                "op": op,
                "shape": "[16,16]",
                "dtype": "float32",
            }
        )
    rows.append({"kind": "free", "time_ns": 100, "device": device, "buffer_id": 0, "bytes": 1024})
    return rows


def write(
    path: Path,
    rows: list[dict] | None = None,
    header: object = None,
    batch: pa.RecordBatch | None = None,
    raw_header: bytes | None = None,
) -> Path:
    """A stream whose header is `header` (dumped as JSON, NaN allowed) or `raw_header`."""
    if header is None:
        header = {"format": "tpumem-trace", "format_version": 1, "framework": "jax"}
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    if batch is None:
        batch = rows_to_batch(_rows() if rows is None else rows)
    schema = batch.schema.with_metadata({b"tpumem": text})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        writer.write_batch(batch.replace_schema_metadata(schema.metadata))
    return path


def _header(**fields: object) -> dict:
    return {"format": "tpumem-trace", "format_version": 1, "framework": "jax", **fields}


def _table_with(name: str, array: pa.Array) -> pa.RecordBatch:
    batch = rows_to_batch(_rows())
    index = batch.schema.get_field_index(name)
    return batch.set_column(index, name, array)


def _replaced(name: str, values: list, dtype: pa.DataType) -> pa.RecordBatch:
    return _table_with(name, pa.array(values, type=dtype))


def _meta_row(text: str) -> dict:
    return {"kind": "meta", "time_ns": 5, "text": text}


def _hlo_row(text: str) -> dict:
    return {"kind": "hlo", "time_ns": 6, "text": text}


def _hostile_program() -> bytes:
    """A real HloProto whose every name is markup."""
    return hlo_proto(
        {1: 4096, 2: 2048},
        [(ALLOC, 2), (FREE, 2)],
        {1: "parameter"},
        names=lambda i: f"{HTML}{i}",
        op=lambda i: HTML,
        source=f"/{HTML}.py",
    )


def _with_stack(stack_id: int, stack_text: str | None) -> list[dict]:
    """Allocations made by stack `stack_id`, after a stack row of that id whose
    text is `stack_text` (None: no such row)."""
    rows = [{**row, "stack": stack_id} if row["kind"] == "alloc" else row for row in _rows()]
    if stack_text is None:
        return rows
    return [{"kind": "stack", "time_ns": 0, "stack": stack_id, "text": stack_text}, *rows]


def _with_shape(shape: str, dtype: str = "float32") -> list[dict]:
    """The rows, the first buffer of `shape` and `dtype`."""
    rows = _rows()
    rows[0] = {**rows[0], "shape": shape, "dtype": dtype}
    return rows


def packed_zeros(size: int) -> str:
    """`size` zero bytes as an hlo row packs a proto (hlo_rows.pack), compressed a
    MiB at a time: a 257 MiB proto in 350 KB."""
    squeeze, mib = zlib.compressobj(6), bytes(1 << 20)
    parts = [squeeze.compress(mib) for _ in range(size >> 20)]
    parts += [squeeze.compress(bytes(size % (1 << 20))), squeeze.flush()]
    return base64.b64encode(b"".join(parts)).decode("ascii")


def zeros_hlo_row(size: int) -> dict:
    """An hlo row whose proto is `size` zero bytes."""
    record = {"origin": "zeros", "program_id": 1, "encoding": "zlib+base64"}
    return _hlo_row(json.dumps({**record, "hlo_proto": packed_zeros(size)}))


def cases() -> dict[str, Callable[[Path], Path]]:
    """name -> writes the trace at the path given."""
    n = len(_rows())
    big = 1 << 62
    made: dict[str, Callable[[Path], Path]] = {
        "null kind": lambda p: write(p, [*_rows(), {"time_ns": 7, "device": "GPU:0"}]),
        "meta not an object": lambda p: write(p, [*_rows(), _meta_row("[1, 2, 3]")]),
        "meta not json": lambda p: write(p, [*_rows(), _meta_row("{not json")]),
        "meta nested deep": lambda p: write(p, [*_rows(), _meta_row("[" * 100000)]),
        "meta warnings not a list": lambda p: write(p, [*_rows(), _meta_row('{"warnings": "x"}')]),
        "header a list": lambda p: write(p, header=[1, 2]),
        "stack names html": lambda p: write(
            p, _with_stack(0, json.dumps([[HTML, 1, HTML], [ESCAPES + MARKUP, 2, MARKUP]]))
        ),
        "stack not json": lambda p: write(p, _with_stack(0, "[[not json")),
        "stack nested deep": lambda p: write(p, _with_stack(0, "[" * 100000)),
        "dtype float0": lambda p: write(p, _with_shape("[3,5]", "float0")),
        "dtype of width 00": lambda p: write(p, _with_shape("[7]", "int00")),
        "dims of 4,000 digits": lambda p: write(p, _with_shape("[" + "9" * 4000 + ",2]")),
        "shape of rank 1,000": lambda p: write(p, _with_shape("[" + ",".join(["3"] * 1000) + "]")),
        "hlo of 257 MiB of zeros": lambda p: write(p, [*_rows(), zeros_hlo_row(257 << 20)]),
        "process html": lambda p: write(
            p, header=_header(host=HTML, run=HTML, process={"index": 3, "count": 4, "source": HTML})
        ),
        "process wrong types": lambda p: write(
            p, header=_header(process={"index": "zero", "count": [1], "source": 7}, pid="x")
        ),
        "process not an object": lambda p: write(p, header=_header(process=[0, 2])),
        "stack frames wrong": lambda p: write(p, _with_stack(0, '[["a", "x", 3], 5]')),
        "stack id unknown": lambda p: write(p, _with_stack(12345, None)),
        "stack id negative": lambda p: write(p, _with_stack(-7, '[["a.py", 1, "f"]]')),
        "hlo names html": lambda p: write(
            p, [*_rows(), _hlo_row(hlo_row_text(HTML, _hostile_program(), 3))]
        ),
        "hlo not base64": lambda p: write(
            p, [*_rows(), _hlo_row('{"encoding": "zlib+base64", "hlo_proto": "%%%"}')]
        ),
        "hlo not a proto": lambda p: write(
            p, [*_rows(), _hlo_row(hlo_row_text("junk", b"\x0a\xff\xff\xff\x0f", None))]
        ),
        "hlo frees twice": lambda p: write(
            p,
            [
                *_rows(),
                _hlo_row(
                    hlo_row_text("x", hlo_proto({2: 8}, [(ALLOC, 2), (FREE, 2), (FREE, 2)], {}))
                ),
            ],
        ),
        "header not utf-8": lambda p: write(p, raw_header=b'{"format": "\xff\xfe"}'),
        "header NaN": lambda p: write(p, header=_header(start_time_ns=float("nan"))),
        "header infinite end": lambda p: write(p, header=_header(end_time_ns=float("inf"))),
        "framework a number": lambda p: write(p, header=_header(framework=12)),
        "devices a string": lambda p: write(p, header=_header(devices="GPU:0")),
        "devices of strings": lambda p: write(p, header=_header(devices=["GPU:0", 3])),
        "capacity a string": lambda p: write(
            p, header=_header(devices=[{"name": "GPU:0", "capacity_bytes": "lots"}])
        ),
        "warnings a string": lambda p: write(p, header=_header(warnings="careful")),
        "capture a list": lambda p: write(p, header=_header(capture=[1])),
        "capture odd fields": lambda p: write(
            p, header=_header(capture={"chunks": "3", "chunk_s": None, "gaps": 2})
        ),
        "exit a string": lambda p: write(p, header=_header(exit="crashed")),
        "exit odd fields": lambda p: write(p, header=_header(exit={"signal": "9", "code": []})),
        "command a string": lambda p: write(p, header=_header(command="train.py")),
        "command of numbers": lambda p: write(p, header=_header(command=[1, 2])),
        "fidelity a list": lambda p: write(p, header=_header(fidelity=["allocator"])),
        "book odd fields": lambda p: write(
            p, header=_header(buffer_book={"tensors_seen": 1, "arrays_entered": "x"})
        ),
        "settings a list": lambda p: write(p, header=_header(allocator_settings=[1], env=[2])),
        "version as string": lambda p: write(p, header=_header(format_version="1")),
        "version 0": lambda p: write(p, header=_header(format_version=0)),
        "version -1": lambda p: write(p, header=_header(format_version=-1)),
        "version true": lambda p: write(p, header=_header(format_version=True)),
        "missing kind column": lambda p: write(
            p, batch=rows_to_batch(_rows()).drop_columns("kind")
        ),
        "duplicate column": lambda p: write(
            p,
            batch=pa.RecordBatch.from_arrays(
                [*rows_to_batch(_rows()).columns, pa.array([1] * n, pa.int64())],
                names=[*SCHEMA.names, "bytes"],
            ),
        ),
        "bytes as strings": lambda p: write(
            p, batch=_replaced("bytes", ["1", "x", None, "3", "4"], pa.string())
        ),
        "time as floats": lambda p: write(
            p, batch=_replaced("time_ns", [0.5, 1e30, float("nan"), 3.0, 4.0], pa.float64())
        ),
        "kind as ints": lambda p: write(p, batch=_replaced("kind", [1, 2, 3, 4, 5], pa.int64())),
        "device as a list": lambda p: write(
            p, batch=_replaced("device", [[1], [2], [3], [4], [5]], pa.list_(pa.int64()))
        ),
        "2^62 bytes": lambda p: write(
            p, batch=_replaced("bytes", [big, big, big, big, big], pa.int64())
        ),
        "negative bytes": lambda p: write(
            p, batch=_replaced("bytes", [-5, -(1 << 63), 3, 4, 5], pa.int64())
        ),
        "extreme times": lambda p: write(
            p,
            batch=_replaced(
                "time_ns", [-(1 << 63), (1 << 63) - 1, 0, -(1 << 63), (1 << 63) - 1], pa.int64()
            ),
        ),
        "fragmentation infinite": lambda p: write(
            p,
            batch=_replaced(
                "fragmentation",
                [float("inf"), float("-inf"), float("nan"), 2.0, -1.0],
                pa.float64(),
            ),
        ),
        "counters extreme": lambda p: write(
            p,
            batch=_replaced("bytes_in_use", [big, -big, (1 << 63) - 1, 0, 1], pa.int64()),
        ),
        "escapes everywhere": lambda p: write(
            p,
            [
                *_rows(device=ESCAPES, op=ESCAPES + MARKUP),
                _meta_row(json.dumps({"warnings": [ESCAPES]})),
            ],
            header=_header(
                framework=ESCAPES,
                backend=MARKUP,
                command=[ESCAPES, MARKUP],
                warnings=[MARKUP, ESCAPES],
                exit={"code": 1, "exception": ESCAPES},
            ),
        ),
        "html in names": lambda p: write(
            p,
            [*_rows(device=HTML, op=HTML)],
            header=_header(framework=HTML, command=[HTML], warnings=[HTML]),
        ),
        "program not json": lambda p: write(
            p, [*_rows(), {"kind": "program", "time_ns": 1, "text": "{oops"}]
        ),
        "program odd fields": lambda p: write(
            p,
            [
                *_rows(),
                {"kind": "program", "time_ns": 1, "text": '{"name": 5, "temp_bytes": "x"}'},
                {"kind": "program", "time_ns": 2, "text": "[1]"},
            ],
        ),
        "free before alloc": lambda p: write(
            p, [{"kind": "free", "time_ns": 0, "device": "GPU:0", "buffer_id": 9, "bytes": 8}]
        ),
        "only marks": lambda p: write(
            p, [{"kind": "mark", "time_ns": 0, "text": "step", "step": -5}]
        ),
        "no rows": lambda p: write(p, batch=rows_to_batch(_rows()).slice(0, 0)),
        "batch claims a terabyte": lambda p: claiming_body(write(p), 1 << 40),
    }
    return made


def claiming_body(path: Path, size: int) -> Path:
    """The trace with its record batch's message saying its body holds `size`
    bytes (the metadata's bodyLength, an int64), the bytes themselves as they were."""
    data = bytearray(path.read_bytes())
    at = 0
    while True:
        length = int.from_bytes(data[at + 4 : at + 8], "little")
        message = pa.ipc.read_message(pa.BufferReader(bytes(data[at:])))
        body = message.body.size if message.body is not None else 0
        if message.type == "record batch":
            break
        at += 8 + length + body
    metadata = bytes(data[at + 8 : at + 8 + length])
    field = metadata.index(body.to_bytes(8, "little"))
    data[at + 8 + field : at + 16 + field] = size.to_bytes(8, "little")
    path.write_bytes(data)
    return path
