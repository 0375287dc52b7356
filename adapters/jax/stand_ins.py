"""The shaped stand-ins `tpumem fit` hands a script instead of arrays
(jax.ShapeDtypeStruct: shape, dtype, weak type, sharding), and what makes two
calls of a jitted function one compile. Used by compile_only.py."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Collection
from typing import Any

from tpumem.hlo.tiles import MAX_RANK, element_bits, tiled_bytes

# The references an object held by one list alone shows to sys.getrefcount read
# through that list: the list's and the call's argument (2 on CPython 3.11, fewer
# where the interpreter borrows references): measured, not assumed.
_HELD = [object()]
ALONE = sys.getrefcount(_HELD[0])


def spec(x: Any) -> Any:
    """An array of the script's as a shape (uncommitted: XLA:TPU places it with
    the call's other arguments); anything else as it is."""
    import jax
    import numpy as np

    if isinstance(x, jax.core.Tracer):
        return x
    if isinstance(x, jax.Array):
        return jax.ShapeDtypeStruct(x.shape, x.dtype, weak_type=_weak(x))
    if isinstance(x, np.ndarray):
        # JAX takes a float64 or int64 array at its own width (x64 off: 32 bits).
        return jax.ShapeDtypeStruct(x.shape, jax.dtypes.canonicalize_dtype(x.dtype))
    return x


def stand_in(array: Any, sharding: Any) -> Any:
    """What `jax.device_put(array, sharding)` onto the slice gives the script."""
    import jax
    import numpy as np

    dtype = getattr(array, "dtype", None)
    dtype = jax.dtypes.canonicalize_dtype(dtype if dtype is not None else np.result_type(array))
    return jax.ShapeDtypeStruct(np.shape(array), dtype, sharding=sharding, weak_type=_weak(array))


def placed(sharding: Any) -> Any:
    """The sharding a stand-in keeps: None for an output on one chip or where
    nothing decided, left uncommitted, as a fresh array is, so that the next call
    places it with its other arguments."""
    import jax

    if not isinstance(sharding, jax.sharding.Sharding) or isinstance(
        sharding, jax.sharding.SingleDeviceSharding
    ):
        return None
    return sharding


def out_stand_in(info: Any, sharding: Any) -> Any:
    """A program's output, with the sharding it keeps (placed)."""
    import jax

    return jax.ShapeDtypeStruct(
        info.shape, info.dtype, sharding=placed(sharding), weak_type=_weak(info)
    )


def refused_out(info: Any) -> Any:
    """A refused program's output: its shape, and the sharding its jit named (so
    the next call is the same compile, not another refusal)."""
    return out_stand_in(info, getattr(info, "sharding", None))


def weak_as_lowered(tree: Any, lowered: Any) -> Any:
    """The outputs `tree` with the weak types the program's outputs have: a
    step's counter (`step + 1` of a Python int) stays weakly typed as in a run,
    so the next call is the same compile. XLA's output info has no weak types;
    JAX's lowering keeps its output avals (a private field: without it, as
    they are)."""
    import jax

    try:
        avals = lowered._lowering.compile_args["global_out_avals"]
    except (AttributeError, KeyError, TypeError):
        return tree
    leaves, structure = jax.tree.flatten(tree)
    if len(avals) != len(leaves):
        return tree
    weak = [
        jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding, weak_type=_weak(a))
        for x, a in zip(leaves, avals, strict=True)
    ]
    return jax.tree.unflatten(structure, weak)


def fresh(tree: Any) -> Any:
    """New stand-ins like `tree`'s: each call's own, none shared with a cache."""
    import jax

    def copy(x: Any) -> Any:
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding, weak_type=_weak(x))

    return jax.tree.map(copy, tree)


def shard_bytes(x: Any) -> int:
    """One chip's shard of a stand-in, in XLA:TPU's tiles (hlo/tiles.py: a
    f32[16M,3] takes 256 MiB, not its elements' 192)."""
    shape = tuple(x.shape)
    sharding = x.sharding
    if sharding is not None and hasattr(sharding, "shard_shape"):
        with contextlib.suppress(ValueError, TypeError):  # (one that does not divide it)
            shape = tuple(sharding.shard_shape(shape))
    try:
        itemsize = int(x.dtype.itemsize)
    except (AttributeError, TypeError):  # (an extended dtype that gives none)
        return 0
    bits = element_bits(str(x.dtype)) or itemsize * 8
    if not all(isinstance(d, int) for d in shape) or len(shape) > MAX_RANK:
        return math.prod(shape) * itemsize
    return tiled_bytes(shape, bits).best


def holds_stand_ins(x: Any) -> bool:
    import jax

    return any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in jax.tree.leaves(x))


def has_tracers(x: Any) -> bool:
    """A call made while JAX traces another function (jax.grad, vmap, a jit in a
    jit): it is part of that program, not one of its own."""
    import jax

    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(x))


def signature(
    args: tuple, kwargs: dict, static_nums: Collection[int], static_names: Collection[str]
) -> Any:
    """What makes two calls one compile, as JAX decides: the tree of the
    arguments, each array's shape, dtype, weak type and sharding (a Python or
    numpy scalar's as JAX abstracts it: its value is traced, not compiled in), the static
    arguments' values. None where a value cannot be a key."""
    import jax
    import numpy as np

    count = len(args)
    static = {i for i in static_nums if -count <= i < count}
    static = {i % count for i in static} if count else set()
    dynamic = [a for i, a in enumerate(args) if i not in static]
    dynamic_names = sorted(k for k in kwargs if k not in static_names)
    leaves, tree = jax.tree.flatten((dynamic, [kwargs[k] for k in dynamic_names]))
    key: list[tuple] = []
    for leaf in leaves:
        if isinstance(leaf, jax.ShapeDtypeStruct):
            key.append(("array", leaf.shape, str(leaf.dtype), _weak(leaf), leaf.sharding))
        elif isinstance(leaf, bool | int | float | complex | np.generic):
            # As JAX sees it: a Python int is a weak int32, as `step + 1` is.
            aval = jax.typeof(leaf)
            key.append(("array", (), str(aval.dtype), _weak(aval), None))
        else:
            key.append(("value", type(leaf).__name__, leaf))
    fixed = tuple(sorted((i, args[i]) for i in static)) + tuple(
        sorted((k, v) for k, v in kwargs.items() if k in static_names)
    )
    whole = (tuple(dynamic_names), tree, tuple(key), fixed)
    try:
        hash(whole)
    except TypeError:
        return None
    return whole


def _weak(x: Any) -> bool:
    return bool(getattr(x, "weak_type", False))
