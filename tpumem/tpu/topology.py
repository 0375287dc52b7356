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
# Cloud TPU's slice names: a generation (v5litepod is v5e's accelerator type) and
# a count: chips for v5e and v6e, TensorCores for v4 and v5p (two a chip, so
# v5p-8 is 4 chips).
_SLICE = re.compile(r"^(v4|v5p|v5e|v5litepod|v6e)-([0-9]{1,5})$")
_CORES_PER_CHIP = {"v4": 2, "v5p": 2, "v5e": 1, "v6e": 1}
# The 2D slices Cloud TPU offers (v5e and v6e), by chips.
_SHAPES_2D = {
    1: (1, 1),
    4: (2, 2),
    8: (2, 4),
    16: (4, 4),
    32: (4, 8),
    64: (8, 8),
    128: (8, 16),
    256: (16, 16),
}
EXAMPLES = "v5e:1x1, v5e:2x4, v4:2x2x1, v5p:2x2x2"
SLICE_EXAMPLES = "v5e-8, v5p-8, v6e-256"


@dataclass(frozen=True, slots=True)
class Topology:
    name: str  # as libtpu reads it: the generation and the chips per axis
    generation: str
    dims: tuple[int, int, int]  # chips along x, y, z

    @property
    def chips(self) -> int:
        return math.prod(self.dims)


def _slice_dims(text: str, generation: str, count: int) -> list[int]:
    """A Cloud slice's chips per axis: v5e and v6e as Cloud TPU lays them out; a
    3D torus from 2x2x1, its shortest axis doubled (the last of equals), which
    gives Cloud's v4 and v5p shapes (2x2x2, 2x2x4, 2x4x4, 4x4x4, ...)."""
    per_chip = _CORES_PER_CHIP[generation]
    chips, odd = divmod(count, per_chip)
    if GENERATIONS[generation] == 2:
        if odd or chips not in _SHAPES_2D:
            sizes = ", ".join(f"{generation}-{n}" for n in _SHAPES_2D)
            raise TpumemError(f"--tpu {text!r}: {generation} slices are {sizes}")
        return list(_SHAPES_2D[chips])
    if odd or chips < 4 or chips & (chips - 1):
        raise TpumemError(
            f"--tpu {text!r}: a {generation} slice name counts TensorCores, two a chip, "
            f"in powers of two from {generation}-8 (4 chips); name another shape by its "
            f"chips per axis, e.g. {generation}:4x4x12"
        )
    dims = [2, 2, 1]
    while dims[0] * dims[1] * dims[2] < chips:
        shortest = min(dims)
        axis = max(i for i, d in enumerate(dims) if d == shortest)
        dims[axis] *= 2
    return dims


def parse_topology(text: str) -> Topology:
    """`text` (a libtpu topology, `v5e:2x4`, or a Cloud slice name, `v5e-8`) as a
    Topology; TpumemError naming the accepted forms otherwise."""
    cloud = _SLICE.match(text.strip().lower())
    if cloud is not None:
        generation = "v5e" if cloud.group(1) == "v5litepod" else cloud.group(1)
        dims = _slice_dims(text, generation, int(cloud.group(2)))
        return parse_topology(f"{generation}:{'x'.join(map(str, dims))}")
    match = _NAME.match(text.strip().lower())
    generation = match.group(1) if match else None
    if match is None or generation not in GENERATIONS:
        raise TpumemError(
            f"--tpu {text!r}: not a TPU topology tpumem knows; give a Cloud TPU slice "
            f"({SLICE_EXAMPLES}) or a generation ({', '.join(GENERATIONS)}) and its chips "
            f"per axis ({EXAMPLES})"
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


# Where a program its slice refused is compiled once more, to show what fills it:
# of the generations libtpu compiles for with one device a chip, the one whose
# chip holds the most (v5p: 95 GiB, against 16 on v5e and 32 on v6e).
DIAGNOSTIC_GENERATION = "v5p"


def diagnostic_topology(chips: int, refused_on: str) -> Topology | None:
    """A DIAGNOSTIC_GENERATION topology of `chips` chips for a program a
    `refused_on` slice refused; None where no such topology would hold more (the
    refusing slice is of it) or none has that many chips (counts past 2 that are no
    power of two)."""
    if refused_on == DIAGNOSTIC_GENERATION or chips < 1:
        return None
    if chips <= 2:
        return parse_topology(f"{DIAGNOSTIC_GENERATION}:{chips}x1x1")
    if chips & (chips - 1) or chips > LARGEST_SLICE_CHIPS[DIAGNOSTIC_GENERATION]:
        return None
    per_chip = _CORES_PER_CHIP[DIAGNOSTIC_GENERATION]
    return parse_topology(f"{DIAGNOSTIC_GENERATION}-{chips * per_chip}")
