"""A PyTorch memory snapshot read as it streams: its trace entries as rows of
columns, its other parts (segments, settings, annotations) as Python values.

Read by the C walker of pickle_walk.c where the install built it: in memory the
size of the allocator's state plus a few bytes an entry, never executing the
pickle. Without it, the snapshot is unpickled whole (no object but plain data is
allowed to load) and its entries turned into the same rows: the same answers, in
several times the file's size of memory. tests/unit/test_snapshot_import.py holds the
two to the same rows.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from tpumem import c_library
from tpumem.errors import TpumemError

MODULE = "tpumem.snapshots._pickle_walk"
# Set (to anything) to read with the unpickler although the walker is built.
UNPICKLER_ONLY_VARIABLE = "TPUMEM_SNAPSHOT_UNPICKLER"
PIECE_BYTES = 8 << 20
# The walker's action codes (pickle_walk.c), by PyTorch's names.
ACTIONS = (
    "other",
    "alloc",
    "free_requested",
    "free_completed",
    "segment_alloc",
    "segment_free",
    "segment_map",
    "segment_unmap",
    "oom",
    "snapshot",
)
ACTION = {name: code for code, name in enumerate(ACTIONS)}
_MOST_NESTED = 64  # a snapshot's values nest 6 deep; deeper is not one
MAX_CATEGORIES = 64  # (pickle_walk.c's): torch.profiler's conversion names a dozen

_P, _I64, _I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
_T_NONE, _T_FALSE, _T_TRUE, _T_INT, _T_FLOAT, _T_STR, _T_BYTES = range(1, 8)
_T_DICT, _T_LIST, _T_TUPLE = 8, 9, 10
_T_STACKREF = 13  # a frames list the walker kept as its stack id


@dataclass(frozen=True, slots=True)
class EntryRows:
    """Trace entries in the snapshot's order; `frames`: a stack id, one for every
    distinct list of frames (walker.frames reads it), -1 for none; `buffer`: the
    row of the allocation a free frees (-1: made before the trace), an
    allocation's own row."""

    first_row: int
    device: np.ndarray  # int32: its index in device_traces
    action: np.ndarray  # int8: ACTIONS
    category: np.ndarray  # int16: walker.categories, -1 for none
    addr: np.ndarray  # int64: address; an OOM's device_free
    size: np.ndarray  # int64
    stream: np.ndarray  # int64
    time_us: np.ndarray  # int64, -1 where the entry has none
    frames: np.ndarray  # int64
    buffer: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.action)


@cache
def _library() -> ctypes.CDLL | None:
    return c_library.load(MODULE, UNPICKLER_ONLY_VARIABLE, _declare)


def _declare(library: ctypes.CDLL) -> None:
    signatures: dict[str, tuple[Any, list[Any]]] = {
        "tpumem_walker_new_keyed": (_P, [ctypes.c_uint64, ctypes.c_uint64]),
        "tpumem_walker_free": (None, [_P]),
        "tpumem_walker_error": (ctypes.c_char_p, [_P]),
        "tpumem_walker_feed": (_I64, [_P, _P, _I64]),
        "tpumem_walker_stopped": (ctypes.c_int, [_P]),
        "tpumem_walker_rows": (_I64, [_P]),
        "tpumem_walker_take": (None, [_P] + [_P] * 9),
        "tpumem_walker_live": (_I64, [_P, _P, _P, _I64]),
        "tpumem_walker_root": (None, [_P, _P, _P, _P]),
        "tpumem_walker_length": (_I64, [_P, _I64]),
        "tpumem_walker_item": (ctypes.c_int, [_P, _I64, _I64, _P, _P, _P]),
        "tpumem_walker_bytes": (_P, [_P, _I64]),
        "tpumem_walker_category": (ctypes.c_int, [_P, ctypes.c_int, _P, _P]),
        "tpumem_walker_stack_list": (_I64, [_P, _I64]),
    }
    for name, (result, arguments) in signatures.items():
        function = getattr(library, name)
        function.restype = result
        function.argtypes = arguments


def walker_built() -> bool:
    return _library() is not None


class SnapshotWalk:
    """One pass over a snapshot: iterate `rows()` to the end, then read `rest`
    (the snapshot without its entries), `frames(id)`, `categories` and `live()`."""

    def __init__(self, path: Path, on_progress: Callable[[int], None] | None = None) -> None:
        self.path = path
        self._on_progress = on_progress
        self.rest: dict[str, Any] = {}
        self._library = _library()
        self._handle: int | None = None
        self._values: dict[int, Any] = {}
        self._loaded: _Unpickled | None = None

    @property
    def categories(self) -> tuple[str, ...]:
        """The `category` strings the rows' codes name, as read so far."""
        if self._loaded is not None:
            return self._loaded.categories
        return self._read_categories() if self._handle else ()

    def rows(self) -> Iterator[EntryRows]:
        with _open(self.path) as file:
            if self._library is None:
                self._loaded = _Unpickled(self.path, file)
                yield from self._loaded.rows()
                self.rest = self._loaded.rest
                return
            yield from self._walk(file)

    def _walk(self, file: BinaryIO) -> Iterator[EntryRows]:
        library = self._library
        assert library is not None
        # The key of the walker's tables, drawn for each walk: a file cannot choose
        # addresses or stacks that its hash puts in one slot (pickle_walk.c).
        key = os.urandom(16)
        self._handle = library.tpumem_walker_new_keyed(
            int.from_bytes(key[:8], "little"), int.from_bytes(key[8:], "little")
        )
        if not self._handle:
            raise MemoryError
        pending, read, first_row = b"", 0, 0
        while not library.tpumem_walker_stopped(self._handle):
            piece = file.read(PIECE_BYTES)
            read += len(piece)
            data = pending + piece if pending else piece
            if not piece and not data:
                raise TpumemError(f"{self.path}: ends before the snapshot does (truncated)")
            used = library.tpumem_walker_feed(self._handle, data, len(data))
            if used < 0:
                raise self._unreadable(library.tpumem_walker_error(self._handle).decode())
            if not piece and used == 0 and not library.tpumem_walker_stopped(self._handle):
                raise TpumemError(f"{self.path}: ends before the snapshot does (truncated)")
            pending = data[used:]
            count = library.tpumem_walker_rows(self._handle)
            if count:
                yield self._take(count, first_row)
                first_row += count
            if self._on_progress is not None:
                self._on_progress(read)
        # (a file copied in blocks may end in zeros: nothing of a pickle's)
        if pending.strip(b"\x00") or file.read(1).strip(b"\x00"):
            raise TpumemError(f"{self.path}: holds more after the snapshot's end")
        self.rest = _snapshot_parts(self.path, self._root())

    def _unreadable(self, why: str) -> TpumemError:
        return TpumemError(f"{self.path}: not a readable PyTorch memory snapshot: {why}")

    def _take(self, count: int, first_row: int) -> EntryRows:
        assert self._library is not None
        arrays: dict[str, np.ndarray] = {
            "device": np.empty(count, np.int32),
            "action": np.empty(count, np.int8),
            "category": np.empty(count, np.int16),
            **{
                name: np.empty(count, np.int64)
                for name in ("addr", "size", "stream", "time_us", "frames", "buffer")
            },
        }
        self._library.tpumem_walker_take(self._handle, *(a.ctypes.data for a in arrays.values()))
        return EntryRows(first_row, **arrays)

    def live(self) -> tuple[np.ndarray, np.ndarray]:
        """The allocations the trace made and never freed: (addresses, rows)."""
        if self._loaded is not None:
            return self._loaded.live()
        assert self._library is not None
        count = self._library.tpumem_walker_live(self._handle, None, None, 0)
        addresses, rows = np.empty(count, np.int64), np.empty(count, np.int64)
        self._library.tpumem_walker_live(
            self._handle, addresses.ctypes.data, rows.ctypes.data, count
        )
        order = np.argsort(rows, kind="stable")
        return addresses[order], rows[order]

    def frames(self, stack: int) -> list[Any]:
        """The frames of a row's stack (its `frames`), as the snapshot holds them."""
        if self._loaded is not None:
            return self._loaded.frames(stack)
        assert self._library is not None
        container = self._library.tpumem_walker_stack_list(self._handle, stack)
        value = self._container(_T_LIST, container, 0) if container >= 0 else []
        return value if isinstance(value, list) else []

    def close(self) -> None:
        if self._handle and self._library is not None:
            self._library.tpumem_walker_free(self._handle)
        self._handle = None
        self._values.clear()

    def __enter__(self) -> SnapshotWalk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read_categories(self) -> tuple[str, ...]:
        assert self._library is not None
        names, offset, length = [], ctypes.c_int64(), ctypes.c_int32()
        index = 0
        while not self._library.tpumem_walker_category(
            self._handle, index, ctypes.byref(offset), ctypes.byref(length)
        ):
            names.append(self._text(offset.value, length.value))
            index += 1
        return tuple(names)

    def _root(self) -> Any:
        assert self._library is not None
        tag, value, length = ctypes.c_int32(), ctypes.c_int64(), ctypes.c_int32()
        self._library.tpumem_walker_root(
            self._handle, ctypes.byref(tag), ctypes.byref(value), ctypes.byref(length)
        )
        return self._value(tag.value, value.value, length.value, 0)

    def _text(self, offset: int, length: int) -> str:
        assert self._library is not None
        data = ctypes.string_at(self._library.tpumem_walker_bytes(self._handle, offset), length)
        return data.decode("utf-8", "replace")

    def _value(self, tag: int, value: int, length: int, depth: int) -> Any:
        if tag == _T_INT:
            return value
        if tag == _T_STR:
            return self._text(value, length)
        if tag in (_T_DICT, _T_LIST, _T_TUPLE):
            return self._container(tag, value, depth)
        if tag == _T_STACKREF:
            return self.frames(value)
        if tag == _T_FLOAT:
            return struct.unpack("<d", struct.pack("<q", value))[0]
        if tag == _T_BYTES:
            assert self._library is not None
            return ctypes.string_at(self._library.tpumem_walker_bytes(self._handle, value), length)
        return {_T_TRUE: True, _T_FALSE: False}.get(tag)

    def _container(self, tag: int, container: int, depth: int) -> Any:
        # Shared values (frames, keys) are read once: a value a hostile pickle
        # refers to from everywhere costs its size once, not once a reference.
        if container in self._values:
            return self._values[container]
        if depth > _MOST_NESTED:
            raise self._unreadable(f"values nested more than {_MOST_NESTED} deep")
        assert self._library is not None
        count = self._library.tpumem_walker_length(self._handle, container)
        item_tag, item, length = ctypes.c_int32(), ctypes.c_int64(), ctypes.c_int32()
        items = []
        for index in range(max(count, 0)):
            self._library.tpumem_walker_item(
                self._handle,
                container,
                index,
                ctypes.byref(item_tag),
                ctypes.byref(item),
                ctypes.byref(length),
            )
            items.append(self._value(item_tag.value, item.value, length.value, depth + 1))
        result: Any
        if tag == _T_DICT:
            keys = items[0::2]
            if not all(isinstance(k, (str, int, float, bool, bytes, type(None))) for k in keys):
                raise self._unreadable("a dict keyed by a list or dict")
            result = dict(zip(keys, items[1::2], strict=True))
        else:
            result = tuple(items) if tag == _T_TUPLE else items
        self._values[container] = result
        return result


def _open(path: Path) -> BinaryIO:
    try:
        return open(path, "rb")
    except IsADirectoryError:
        raise TpumemError(f"{path}: a directory, not a snapshot file") from None
    except OSError as error:
        raise TpumemError(f"{path}: cannot read: {error.strerror}") from None


class _DataOnly(pickle.Unpickler):
    """Loads plain data; refuses any object a pickle would build (it could run code)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(
            f"it names {module}.{name}: the pickle holds more than plain data"
        )


class _Unpickled:
    """The fallback: the snapshot unpickled whole, its entries made into the rows
    the walker gives (the same pairing: a free_completed ends the latest
    allocation at its address)."""

    def __init__(self, path: Path, file: BinaryIO) -> None:
        self.path = path
        try:
            snapshot = _DataOnly(file).load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError) as error:
            raise TpumemError(
                f"{path}: not a readable PyTorch memory snapshot: {error or 'truncated'}"
            ) from None
        if file.read(1).strip(b"\x00"):
            raise TpumemError(f"{path}: holds more after the snapshot's end")
        self.rest = _snapshot_parts(path, snapshot)
        self.categories: tuple[str, ...] = ()
        self._frames: list[list[Any]] = []
        # (address -> row. Python's dict probes on with every bit of an int's hash,
        # and no more than 8 int64s share one: no choice of addresses floods it, as
        # benchmarks/snapshot_flood.py measures.)
        self._live: dict[int, int] = {}

    def rows(self) -> Iterator[EntryRows]:
        traces = self.rest.get("device_traces")
        if not isinstance(traces, list):
            return
        categories: dict[str, int] = {}
        frames_ids: dict[tuple[int, ...], int] = {}
        columns: dict[str, list[int]] = {name: [] for name in EntryRows.__slots__[1:]}
        row = 0
        for device, trace in enumerate(traces):
            if not isinstance(trace, list):
                continue
            kept = []
            for entry in trace:
                action = entry.get("action") if isinstance(entry, dict) else None
                if not isinstance(action, str):
                    kept.append(entry)
                    continue
                code = ACTION.get(action, 0)
                # (as the walker: an OOM's address is what CUDA had free)
                addr = _integer(entry.get("device_free" if code == ACTION["oom"] else "addr"))
                buffer = -1
                if code == ACTION["alloc"]:
                    self._live[addr] = buffer = row
                elif code == ACTION["free_requested"]:
                    buffer = self._live.get(addr, -1)
                elif code == ACTION["free_completed"]:
                    buffer = self._live.pop(addr, -1)
                frames = entry.get("frames")
                frames_id = -1
                if isinstance(frames, list) and frames:
                    # (as the walker: equal lists of the same frame objects are one)
                    key = tuple(map(id, frames))
                    frames_id = frames_ids.setdefault(key, len(self._frames))
                    if frames_id == len(self._frames):
                        self._frames.append(frames)
                category = entry.get("category")
                if isinstance(category, str) and len(categories) < MAX_CATEGORIES:
                    categories.setdefault(category, len(categories))
                values = {
                    "device": device,
                    "action": code,
                    "category": categories.get(category, -1) if isinstance(category, str) else -1,
                    "addr": addr,
                    "size": _integer(entry.get("size", -1)),
                    "stream": _integer(entry.get("stream"), missing=0),
                    "time_us": _integer(entry.get("time_us", -1)),
                    "frames": frames_id,
                    "buffer": buffer,
                }
                for name, value in values.items():
                    columns[name].append(value)
                row += 1
            trace[:] = kept
        self.categories = tuple(categories)  # (before the rows: they name them)
        types = {"device": np.int32, "action": np.int8, "category": np.int16}
        yield EntryRows(
            0, **{name: np.array(v, dtype=types.get(name, np.int64)) for name, v in columns.items()}
        )

    def live(self) -> tuple[np.ndarray, np.ndarray]:
        rows = sorted((row, addr) for addr, row in self._live.items())
        return (
            np.array([a for _, a in rows], dtype=np.int64),
            np.array([r for r, _ in rows], dtype=np.int64),
        )

    def frames(self, frames_id: int) -> list[Any]:
        return self._frames[frames_id] if 0 <= frames_id < len(self._frames) else []


def _snapshot_parts(path: Path, value: object) -> dict[str, Any]:
    """The snapshot's dict of parts; what has neither of a snapshot's lists is none."""
    if not isinstance(value, dict) or not any(
        isinstance(value.get(part), list) for part in ("device_traces", "segments")
    ):
        raise TpumemError(
            f"{path}: not a PyTorch memory snapshot (a pickle without device_traces or "
            "segments: write one with torch.cuda.memory._dump_snapshot)"
        )
    return value


def _integer(value: object, missing: int = -1) -> int:
    """An int64 column's value, as the walker reads it: what is no integer (or
    beyond 64 bits, which the walker refuses) reads as `missing`."""
    if isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63:
        return value
    return missing
