"""The trace file: streamed while written, versioned, and a cut file keeps its rows."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest

from tpumem.errors import TpumemError
from tpumem.trace.amend import append_metadata
from tpumem.trace.columns import rows_to_batch
from tpumem.trace.compact import COMPACT_BATCHES, compact
from tpumem.trace.metadata import (
    DeviceInfo,
    ExitStatus,
    TorchXlaBook,
    TorchXlaExtra,
    TraceMetadata,
)
from tpumem.trace.reader import load
from tpumem.trace.schema import META, SCHEMA
from tpumem.trace.writer import TraceWriter


def test_round_trip_with_metadata_patches(tmp_path):
    path = tmp_path / "t.tpumem"
    with TraceWriter(path, {"framework": "jax", "warnings": ["first"]}) as writer:
        writer.alloc(device="TPU:0", bytes=4096, buffer_id=7, op="dot", shape="[32,32]")
        writer.free(device="TPU:0", bytes=4096, buffer_id=7)
        writer.patch_metadata(exit=ExitStatus(code=3), warnings=["second"])
    trace = load(path)
    assert trace.complete
    assert trace.framework == "jax"
    assert trace.metadata.exit == ExitStatus(code=3)
    assert trace.warnings == ["first", "second"]
    assert trace.numbers("bytes")[:2].tolist() == [4096, 4096]
    codes, values = trace.codes("op")
    assert [values[c] if c >= 0 else None for c in codes[:2]] == ["dot", None]


def test_the_metadata_is_typed_on_the_way_in_and_out(tmp_path):
    """Writers name typed fields (a name that is not a field fails at once); the
    reader gives them back typed, leaves out a field of the wrong type with a
    warning, keeps a field it does not know, and the adapter's own fields come
    back as that framework's extra."""
    path = tmp_path / "m.tpumem"
    with TraceWriter(path, {"framework": "torch_xla", "command": ("train.py", "--lr", "3")}) as w:
        w.patch_metadata(
            extra=TorchXlaExtra("2.9.0", TorchXlaBook(syncs=4)),
            devices=[DeviceInfo("CPU:0", "CPU")],
        )
        with pytest.raises(TypeError, match="buffer_book"):
            w.patch_metadata(buffer_book={"syncs": 4})  # the extra's field, not the run's
        w.record(META, text=json.dumps({"exit": {"code": "zero"}, "newer_field": [1]}))
    meta = load(path).metadata
    assert meta.command == ("train.py", "--lr", "3")
    assert meta.extra == TorchXlaExtra("2.9.0", TorchXlaBook(syncs=4))
    assert meta.devices == (DeviceInfo("CPU:0", "CPU"),)
    assert meta.exit == ExitStatus()  # its one field was not an integer
    assert meta.other == {"newer_field": [1]}
    assert [w for w in meta.warnings if "exit.code (not an integer)" in w]
    assert TraceMetadata.from_json(meta.to_json(), []) == meta


def test_rows_reach_the_file_within_the_flush_interval(tmp_path):
    path = tmp_path / "live.tpumem"
    writer = TraceWriter(path, {"framework": "test"}, flush_interval_s=0.1)
    try:
        writer.alloc(device="CPU:0", bytes=1, buffer_id=1)
        time.sleep(0.5)
        # Read while the writer is still open, as after a SIGKILL.
        trace = load(path)
        assert not trace.complete
        assert len(trace) == 1
        assert "not closed" in trace.warnings[-1]
    finally:
        writer.close()


def test_a_cut_file_loads_every_whole_batch_before_the_cut(tmp_path):
    path = tmp_path / "t.tpumem"
    with TraceWriter(path, {"framework": "test"}, flush_interval_s=0) as writer:
        for i in range(3):
            writer.alloc(device="CPU:0", bytes=i + 1, buffer_id=i)
            writer.flush()
    data = path.read_bytes()
    cut = tmp_path / "cut.tpumem"
    cut.write_bytes(data[:-20])  # into the last batch
    trace = load(cut)
    assert not trace.complete
    assert trace.numbers("bytes").tolist() == [1, 2]


def test_a_newer_format_version_is_refused(tmp_path):
    path = tmp_path / "future.tpumem"
    meta = {"format": "tpumem-trace", "format_version": 99}
    with (
        pa.OSFile(str(path), "wb") as sink,
        pa.ipc.new_stream(sink, SCHEMA.with_metadata({b"tpumem": json.dumps(meta).encode()})),
    ):
        pass
    with pytest.raises(TpumemError, match="version 99 is newer"):
        load(path)


def test_another_arrow_stream_is_refused(tmp_path):
    path = tmp_path / "other.arrow"
    table = pa.table({"x": [1, 2]})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    with pytest.raises(TpumemError, match="not a tpumem trace"):
        load(path)


def _many_batches(path, batches: int, close: bool = True) -> None:
    writer = TraceWriter(path, {"framework": "jax"}, flush_interval_s=0)
    for i in range(batches):
        writer.alloc(time_ns=2 * i, device="GPU:0", buffer_id=i, bytes=64, op=f"op{i % 5}")
        writer.free(time_ns=2 * i + 1, device="GPU:0", buffer_id=i, bytes=64)
        if i == batches // 2:
            writer.patch_metadata(warnings=["half way"])
        writer.flush()
    writer.patch_metadata(exit=ExitStatus(code=0))
    if close:
        writer.close()


def _batch_count(path) -> int:
    with pa.ipc.open_stream(pa.OSFile(str(path))) as reader:
        return sum(1 for _ in reader)


def test_compacting_keeps_every_row_and_patch_in_few_batches(tmp_path):
    path = tmp_path / "long.tpumem"
    _many_batches(path, 600)
    before = load(path)
    assert _batch_count(path) > COMPACT_BATCHES
    assert compact(path)
    after = load(path)
    assert _batch_count(path) == 1
    assert after.table.equals(before.table)
    assert after.metadata == before.metadata and after.complete
    assert after.warnings == ["half way"]
    assert not compact(path)  # compact already: left as it is
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.tpumem"]


def test_compacting_leaves_an_unclosed_trace_alone(tmp_path):
    path = tmp_path / "cut.tpumem"
    _many_batches(path, 300, close=False)
    data = path.read_bytes()
    assert not compact(path)
    assert path.read_bytes() == data


def test_a_few_rows_and_many_make_the_same_batch():
    """The writer's few rows of 0.1 s are encoded in one call, many rows column by
    column: both give the schema's columns with the same values."""
    rows = [
        {"kind": "mark", "time_ns": 1, "text": "train", "step": 3},
        {"kind": "sample", "time_ns": 2, "device": "CPU:0", "bytes_in_use": 5},
        {"kind": "alloc", "time_ns": 3, "device": "GPU:1", "op": None, "bytes": 8},
    ]
    few, many = rows_to_batch(rows), rows_to_batch(rows * 40)
    assert few.schema == many.schema == SCHEMA
    assert few.to_pylist() == many.slice(0, 3).to_pylist() == many.slice(117).to_pylist()
    assert few.column("device").to_pylist() == [None, "CPU:0", "GPU:1"]


def test_a_trace_killed_before_its_first_flush_keeps_its_header(tmp_path):
    """Arrow writes a stream's schema with its first batch; the writer puts it on
    disk at once, so a process killed before the first flush leaves a trace that
    loads, with its header, and takes the ending `tpumem profile` appends."""
    path = tmp_path / "t.tpumem"
    writer = TraceWriter(path, {"framework": "jax", "command": ["train.py"]}, flush_interval_s=0)
    writer.mark("never flushed")  # (and never closed: as under SIGKILL or SIGHUP)
    before = load(path)
    assert before.metadata.framework == "jax" and not before.complete
    assert append_metadata(path, 5, exit=ExitStatus(signal=1, signal_name="SIGHUP"))
    after = load(path)
    assert list(after.metadata.command) == ["train.py"]
    assert after.metadata.exit.signal_name == "SIGHUP" and after.complete
