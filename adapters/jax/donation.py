"""Which arguments of a jitted call its outputs replace: those to donate.

By what the call does, never by names: a positional argument (not static, not
donated already) each of whose arrays has the shape and dtype of an output no
other argument took, as a training step gives back its parameters and optimizer
state. `tpumem fit` compiles a refused program again with these donated
(compile_only.py), to see whether that is the change that makes it fit.
"""

from __future__ import annotations

import collections
import inspect
from collections.abc import Callable
from typing import Any


def donatable(
    args: tuple, out_info: Any, static: tuple[int, ...], options: dict
) -> tuple[int, ...]:
    """The positions of the arguments to donate, in order."""
    import jax

    left = collections.Counter(_shape(o) for o in jax.tree.leaves(out_info))
    nums = options.get("donate_argnums", ())
    donated = {nums} if isinstance(nums, int) else set(nums or ())
    found = []
    for position, argument in enumerate(args):
        if position in static or position in donated:
            continue
        leaves = [_shape(a) for a in jax.tree.leaves(argument) if hasattr(a, "shape")]
        if not leaves:
            continue
        wanted = collections.Counter(leaves)
        if all(left[key] >= count for key, count in wanted.items()):
            left -= wanted
            found.append(position)
    return tuple(found)


def argument_names(fun: Callable, positions: tuple[int, ...]) -> tuple[str, ...]:
    """The Python names of the positional arguments (a partial's too); () where
    the signature cannot say (a builtin, *args)."""
    try:
        parameters = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    named = [p.name for p in parameters if p.kind in kinds]
    if any(p >= len(named) for p in positions):
        return ()
    return tuple(named[p] for p in positions)


def _shape(array: Any) -> tuple[tuple[int, ...], str]:
    return tuple(array.shape), str(array.dtype)
