"""TensorBoard event files of scalars, written without TensorFlow or TensorBoard:
TFRecord framing (length, masked CRC-32C of the length, data, masked CRC-32C of
the data) around `Event` protos holding `Summary.Value.simple_value`s."""

from __future__ import annotations

import struct
from pathlib import Path

from tpumem.xplane.encode import FIXED64, LENGTH, tag, varint_bytes

_FIXED32 = 5
_POLY = 0x82F63B78  # CRC-32C (Castagnoli), reflected


def _table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (_POLY if crc & 1 else 0)
        table.append(crc)
    return table


_TABLE = _table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + _masked(length) + data + _masked(data)


def _length_field(number: int, data: bytes) -> bytes:
    return tag(number, LENGTH) + varint_bytes(len(data)) + data


def _event(wall_time: float, step: int | None = None, body: bytes = b"") -> bytes:
    out = tag(1, FIXED64) + struct.pack("<d", wall_time)
    if step:
        out += tag(2, 0) + varint_bytes(step)
    return out + body


def scalar_event(wall_time: float, step: int, values: dict[str, float]) -> bytes:
    summary = b"".join(
        _length_field(
            1, _length_field(1, name.encode()) + tag(2, _FIXED32) + struct.pack("<f", value)
        )
        for name, value in values.items()
    )
    return _event(wall_time, step, _length_field(5, summary))


class EventFileWriter:
    """Appends scalar events to `events.out.tfevents.<time>.<host>` in `directory`."""

    def __init__(self, directory: Path, wall_time: float, host: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"events.out.tfevents.{int(wall_time)}.{host}.tpumem"
        self._records = [_record(_event(wall_time, None, _length_field(3, b"brain.Event:2")))]

    def add(self, wall_time: float, step: int, values: dict[str, float]) -> None:
        self._records.append(_record(scalar_event(wall_time, step, values)))

    def close(self) -> None:
        self.path.write_bytes(b"".join(self._records))
