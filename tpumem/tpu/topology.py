"""TPU topologies `--tpu` names, as libtpu names them: a generation and the chips
along each axis (`v5e:2x2`, `v4:2x2x1`)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tpumem.errors import TpumemError

# Generation -> the axes its topologies name (v4 and v5p are 3D tori, v5e and v6e
# 2D meshes).
GENERATIONS = {"v4": 3, "v5e": 2, "v5p": 3, "v6e": 2}
_NAME = re.compile(r"^(v\d+[a-z]?):(\d+(?:x\d+){1,2})$")
EXAMPLES = "v5e:1x1, v5e:2x2, v6e:2x4, v4:2x2x1, v5p:2x2x1"


@dataclass(frozen=True, slots=True)
class Topology:
    name: str  # as the user wrote it, and libtpu reads it
    generation: str
    dims: tuple[int, int, int]  # chips along x, y, z

    @property
    def chips(self) -> int:
        return math.prod(self.dims)


def parse_topology(text: str) -> Topology:
    """`text` as a Topology; UsageError naming the accepted forms otherwise."""
    match = _NAME.match(text.strip().lower())
    generation = match.group(1) if match else None
    if match is None or generation not in GENERATIONS:
        raise TpumemError(
            f"--tpu {text!r}: not a TPU topology tpumem knows; give a generation "
            f"({', '.join(GENERATIONS)}) and its chips per axis, e.g. {EXAMPLES}"
        )
    dims = [int(d) for d in match.group(2).split("x")]
    if len(dims) != GENERATIONS[generation] or 0 in dims:
        axes = "x".join(["N"] * GENERATIONS[generation])
        raise TpumemError(f"--tpu {text!r}: a {generation} topology names its chips as {axes}")
    dims += [1] * (3 - len(dims))
    return Topology(f"{generation}:{match.group(2)}", generation, (dims[0], dims[1], dims[2]))
