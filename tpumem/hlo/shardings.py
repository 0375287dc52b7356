"""How many devices a program is partitioned over, read from its HLO's shardings.

An HLO module does not carry the partition count it was compiled with (XLA keeps
that in the compile options); the shardings of its instructions name it: a tiled
sharding's tile assignment covers every partition, a maximal one names a device.
A module with no tiled sharding runs whole on each device: one partition.
"""

from __future__ import annotations

import math
from typing import Any

MAXIMAL, TUPLE = 1, 2  # OpSharding.Type, as on the wire


def _devices(sharding: Any) -> int:
    if sharding.type == TUPLE:
        return max((_devices(part) for part in sharding.tuple_shardings), default=1)
    if sharding.type == MAXIMAL:
        return max(sharding.tile_assignment_devices, default=0) + 1
    tiles = (
        math.prod(sharding.tile_assignment_dimensions) if sharding.tile_assignment_dimensions else 1
    )
    listed = max(sharding.tile_assignment_devices, default=-1) + 1
    return max(tiles, listed, 1)


def partitions(module: Any) -> int:
    """The devices `module` (an HloModuleProto) is partitioned over."""
    return max(
        (
            _devices(instruction.sharding)
            for computation in module.computations
            for instruction in computation.instructions
            if instruction.HasField("sharding")
        ),
        default=1,
    )
