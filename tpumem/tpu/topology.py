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
# The chips of each generation's largest slice: its whole pod, as Cloud TPU's
# system architecture pages give it (cloud.google.com/tpu/docs/v4, v5e, v5p and
# v6e): v4 4,096 chips (16x16x16); v5e and v6e 256 (16x16, the largest of their
# 2D slice shapes, so no axis of theirs is longer than 16); v5p 8,960 (its
# largest single-slice job is 16x16x24, 6,144 chips). A topology past these
# exists on no TPU: libtpu would be asked to lay out a machine that cannot be
# built, which costs minutes and gigabytes before it fails.
LARGEST_SLICE_CHIPS = {"v4": 4096, "v5e": 256, "v5p": 8960, "v6e": 256}
LONGEST_2D_AXIS = 16
# ASCII digits only (Python's \d takes any script's digits, which libtpu does
# not read), at most 5 of them: more name no axis of any slice.
_NAME = re.compile(r"^(v[0-9]+[a-z]?):([0-9]{1,5}(?:x[0-9]{1,5}){1,2})$")
EXAMPLES = "v5e:1x1, v5e:2x2, v6e:2x4, v4:2x2x1, v5p:2x2x1"


@dataclass(frozen=True, slots=True)
class Topology:
    name: str  # as libtpu reads it: the generation and the chips per axis
    generation: str
    dims: tuple[int, int, int]  # chips along x, y, z

    @property
    def chips(self) -> int:
        return math.prod(self.dims)


def parse_topology(text: str) -> Topology:
    """`text` as a Topology; TpumemError naming the accepted forms otherwise."""
    match = _NAME.match(text.strip().lower())
    generation = match.group(1) if match else None
    if match is None or generation not in GENERATIONS:
        raise TpumemError(
            f"--tpu {text!r}: not a TPU topology tpumem knows; give a generation "
            f"({', '.join(GENERATIONS)}) and its chips per axis, e.g. {EXAMPLES}"
        )
    dims = [int(d) for d in match.group(2).split("x")]
    axes = GENERATIONS[generation]
    if len(dims) != axes or 0 in dims:
        named = "x".join(["N"] * axes)
        raise TpumemError(f"--tpu {text!r}: a {generation} topology names its chips as {named}")
    largest = LARGEST_SLICE_CHIPS[generation]
    if math.prod(dims) > largest or (axes == 2 and max(dims) > LONGEST_2D_AXIS):
        most = f"{LONGEST_2D_AXIS}x{LONGEST_2D_AXIS}, " if axes == 2 else ""
        raise TpumemError(
            f"--tpu {text!r}: no {generation} slice is that large "
            f"(the largest: {most}{largest:,} chips)"
        )
    name = "x".join(str(d) for d in dims)  # "02x2" is libtpu's 2x2
    dims += [1] * (3 - len(dims))
    return Topology(f"{generation}:{name}", generation, (dims[0], dims[1], dims[2]))
