"""PyTorch memory snapshots made to cost: what `tpumem import SNAPSHOT.pickle`
must read in time linear in their size (tests/cli/test_hostile_inputs.py, and
benchmarks/snapshot_flood.py for the cost)."""

from __future__ import annotations

import pickle
from pathlib import Path

FLOOD_BYTES = 512  # each allocation's size
# Addresses a multiple of this apart: the same low 32 bits, and the same slot
# for any hash of the address that keeps only its low bits (a fixed multiplier's
# product does: its low bits are those of the address).
FLOOD_STRIDE = 1 << 32


def flood_addresses(count: int) -> list[int]:
    """`count` addresses a fixed hash of the address puts in one slot."""
    return [(index + 1) * FLOOD_STRIDE for index in range(count)]


def flooding_snapshot(allocations: int) -> bytes:
    """A snapshot of one device: `allocations` allocations of FLOOD_BYTES at
    flood_addresses, all live at once, then each freed: its peak is
    allocations * FLOOD_BYTES, and nothing is live at its end."""
    addresses = flood_addresses(allocations)
    trace = [
        {"action": "alloc", "addr": a, "size": FLOOD_BYTES, "stream": 0, "time_us": 1 + i}
        for i, a in enumerate(addresses)
    ]
    start = len(trace) + 1
    trace += [
        {"action": "free_completed", "addr": a, "size": FLOOD_BYTES, "stream": 0,
         "time_us": start + i}
        for i, a in enumerate(addresses)
    ]  # fmt: skip
    return pickle.dumps({"segments": [], "device_traces": [trace]}, protocol=4)


def write_flooding_snapshot(path: Path, allocations: int) -> Path:
    path.write_bytes(flooding_snapshot(allocations))
    return path
