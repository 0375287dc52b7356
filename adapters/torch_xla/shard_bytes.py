"""Under SPMD, the bytes of a tensor each device holds: its shard, from the
sharding PyTorch/XLA gives it (`_get_xla_sharding_spec`, in XLA's HLO sharding
text). The book records one device's figures, device 0's: each device of the
mesh holds its own shard of every tensor (padded to the same shape on every
device, as XLA lays shards out), and a whole copy of a replicated one.

  ""  or "{replicated}"                  -> the whole tensor
  "{devices=[4,1]0,1,2,3}"                -> dims divided by the tiles, rounded up
  "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}" -> the last tile replicates
  "{maximal device=3}"                    -> on one device: 0 on device 0, unless 0
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

_TILES = re.compile(r"devices=\[([\d,]+)\]([\d,]*)")
_MAXIMAL = re.compile(r"maximal device=(\d+)")


def device_bytes(spec: str, shape: Sequence[int], item_bytes: int) -> int:
    """The bytes device 0 holds of a tensor of `shape` sharded as `spec`."""
    whole = math.prod(shape) * item_bytes
    maximal = _MAXIMAL.search(spec)
    if maximal is not None:
        return whole if int(maximal[1]) == 0 else 0
    tiles = _TILES.search(spec)
    if tiles is None:
        return whole
    counts = [int(t) for t in tiles[1].split(",") if t]
    if "last_tile_dim_replicate" in spec or "last_tile_dims" in spec:
        counts = counts[: len(shape)]
    if len(counts) != len(shape):
        return whole  # a layout this reading does not know: the whole, not less
    return math.prod(-(-d // t) for d, t in zip(shape, counts, strict=True)) * item_bytes
