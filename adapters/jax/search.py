"""What `tpumem fit` tries when XLA:TPU refuses a program: the changes that
shrink it, one more at a time, in the order a user would make them, each
compiled by XLA:TPU (compile_only.py) until one fits:

1. donation: the arguments the call's outputs replace, donated. By what the
   call does, never by names: a positional argument (not static, not donated
   already) each of whose arrays has the shape and dtype of an output no other
   argument took, as a training step gives back its parameters and optimizer
   state. Costs nothing: the step overwrites what it replaces.
2. that state sharded over the slice's chips (FSDP), where the slice has more
   than one and the state is not split over all of them: each array split along
   its first dimension the chips' count divides (else replicated), the batch
   along its leading dimension where it divides, the jit's own shardings left
   to XLA (a cost in communication: each layer's weights gathered as used).
3. each step of the script's `jax.lax.scan` calls (the layers of a scanned
   model) recomputed in the backward pass: the body under
   `jax.checkpoint(..., policy=nothing_saveable)`, only each step's carry kept
   (a cost in compute: the forward pass again). Offered where the call's trace
   reaches `jax.lax.scan` from the script's own code (scan_lines).
4. that state in bfloat16: the donated arguments' float32 arrays as bfloat16
   (the update then runs in bfloat16: a precision cost, which the words say).
5. half the batch: the other array arguments whose leading dimension is the
   most common one among them (the batch), halved where it is even (twice the
   steps an epoch).
Each is tried with those before it (one JAX cannot lower is left out) until one
set compiles; then each of that
set's that costs something (not donation), but the last, is left out, one at a
time, where the rest still compiles: the fewest costly changes that fit.

With `fit --search`, a training step (a call that gives back state in the shapes
it took, as for donation) that compiled is compiled again at twice its batch,
and twice that, up to LARGEST_FACTOR, until XLA:TPU refuses (larger_batches).
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import math
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tpumem.trace.tpu_rows import RECOMPUTED, SHARDED_OVER

LARGEST_FACTOR = 64  # a step's batch doubled at most up to this many times it
SPLIT_SHARE = 0.9  # state this much split over the slice's chips is sharded already


@dataclass(frozen=True, slots=True)
class Step:
    """One change: its words, and what it does to jax.jit's options and the call's
    arguments (and, `around`, what holds while the changed call is traced)."""

    words: str
    change: Callable[[dict, tuple], tuple[dict, tuple]]
    free: bool = False  # costs nothing (donation): never left out
    around: Callable[[], contextlib.AbstractContextManager] | None = None


@dataclass(frozen=True, slots=True)
class Change:
    words: str  # as the report says it: what the user writes, each part
    names: tuple[str, ...]  # the donated arguments' Python names
    options: dict  # jax.jit's, with the change
    args: tuple  # the call's arguments, with the change


def steps(
    fun: Callable,
    args: tuple,
    out_info: Any,
    static: tuple[int, ...],
    options: dict,
    static_names: tuple[str, ...] = (),
    devices: tuple[Any, ...] = (),
    scans: tuple[str, ...] = (),
) -> tuple[tuple[Step, ...], tuple[str, ...]]:
    """(the changes to try, in order; the names of the arguments donation
    donates); `args`: the call's, as shapes (stand_ins.spec); `devices`: the
    slice's chips; `scans`: the lines of the script's scans (scan_lines)."""
    donate = _state(fun, args, out_info, static, options, static_names)
    if not donate:
        return (), ()
    names = argument_names(fun, donate)
    numbers = tuple(sorted({*_numbers(options), *donate}))
    kept = set(donate) | set(static)
    jit = _jit_name(fun)
    found = [
        Step(
            f"donated ({jit}(..., donate_argnames={names!r}), where the script does not "
            "use them after the call)"
            if len(names) == len(donate)
            else f"donated ({jit}(..., donate_argnums={donate!r}), where the script does "
            "not use them after the call)",
            lambda o, a: ({**o, "donate_argnums": numbers}, a),
            free=True,
        )
    ]
    if len(devices) > 1 and not _split_over(args, donate, len(devices)):
        chips = len(devices)
        found.append(
            Step(
                f"{', '.join(names) or 'the donated state'} {SHARDED_OVER} {chips} chips "
                "(FSDP: jax.device_put(x, NamedSharding(mesh, P('fsdp'))) along a "
                f"dimension {chips} divides, the batch split over them)",
                lambda o, a: (_unpinned(o), _sharded(a, donate, devices)),
            )
        )
    if scans:
        found.append(
            Step(
                f"each step of the scan at {', '.join(scans)} {RECOMPUTED} "
                "(jax.checkpoint(body, policy=jax.checkpoint_policies.nothing_saveable): the "
                "forward pass again)",
                lambda o, a: (o, a),
                around=recomputed_scans,
            )
        )
    if _bfloat16(args, donate) is not None:
        found.append(
            Step(
                f"{', '.join(names) or 'the donated state'} in bfloat16 (the update's precision)",
                lambda o, a: (o, _bfloat16(a, donate) or a),
            )
        )
    smaller = _scaled_batch(args, kept, 0.5)
    if smaller is not None:
        batch = smaller[1]
        found.append(
            Step(
                f"batch {batch // 2}, not {batch} (twice the steps an epoch)",
                lambda o, a: (o, (_scaled_batch(a, kept, 0.5) or (a, 0))[0]),
            )
        )
    return tuple(found), names


def larger_batches(
    fun: Callable,
    args: tuple,
    out_info: Any,
    static: tuple[int, ...],
    options: dict,
    static_names: tuple[str, ...] = (),
) -> Iterator[Change]:
    """A training step's call at twice its batch, four times, ... (each to be
    compiled until one is refused); none for a call that gives back no state
    (an init, an eval step) or has no batch."""
    # Donated already or not, what it gives back is its state.
    state = _state(fun, args, out_info, static, {}, static_names)
    if not state:
        return
    kept = set(state) | set(static)
    factor = 2
    while factor <= LARGEST_FACTOR:
        scaled = _scaled_batch(args, kept, factor)
        if scaled is None:
            return
        changed, batch = scaled
        yield Change(f"batch {batch * factor}, not {batch}", (), options, changed)
        factor *= 2


def _state(
    fun: Callable,
    args: tuple,
    out_info: Any,
    static: tuple[int, ...],
    options: dict,
    static_names: tuple[str, ...],
) -> tuple[int, ...]:
    """The positions of the state the call gives back (donatable), but those
    named static or donated by name already, which are no candidates."""
    every = argument_names(fun, tuple(range(len(args))))
    named = set(static_names) | set(_names(options))
    skipped = tuple(i for i, name in enumerate(every) if name in named)
    return donatable(args, out_info, (*static, *skipped), options)


@contextlib.contextmanager
def recomputed_scans(seen: list[str] | None = None) -> Iterator[None]:
    """While it holds, `jax.lax.scan` recomputes each step's values in the
    backward pass (the script's scans: those that look `jax.lax.scan` up when
    called; JAX's own keep theirs); `seen` gets the script's line of each."""
    import jax

    original = jax.lax.scan

    def scan(f: Callable, *args: Any, **kwargs: Any) -> Any:
        if seen is not None:
            seen.append(_caller())
        policy = jax.checkpoint_policies.nothing_saveable
        return original(jax.checkpoint(f, policy=policy), *args, **kwargs)

    # JAX reuses a function's trace: a jitted function the call reaches, traced
    # before, would not see the change, nor one traced under it lose it after.
    jax.clear_caches()
    jax.lax.scan = scan
    try:
        yield
    finally:
        jax.lax.scan = original
        jax.clear_caches()


def scan_lines(trace: Callable[[], Any]) -> tuple[str, ...]:
    """The script's lines that call `jax.lax.scan` as `trace()` runs (a trace
    of the call with shapes); () where it calls none, or the trace fails."""
    seen: list[str] = []
    try:
        with recomputed_scans(seen):
            trace()
    except Exception:  # (what does not trace here is no candidate)
        return ()
    return tuple(dict.fromkeys(seen))


def _caller() -> str:
    """Where the scan is: the script's file:line that calls `jax.lax.scan`, or,
    for a library's scan (Flax's nn.scan), the library and the script's line
    that reaches it."""
    import os
    import sys
    import sysconfig

    libraries = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib")}
    ours = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (tpumem's)
    frame: types.FrameType | None = sys._getframe(2)
    library = None
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        home = next((p for p in libraries if name.startswith(p + os.sep)), None)
        if home is not None and library is None:
            library = name[len(home) + 1 :].split(os.sep)[0].removesuffix(".py")
        elif home is None and not name.startswith((ours + os.sep, "<")):
            line = f"{os.path.basename(name)}:{frame.f_lineno}"
            return line if library is None else f"{library}'s scan, reached from {line}"
        frame = frame.f_back
    return "?"


def combined(
    chosen: tuple[Step, ...], names: tuple[str, ...], options: dict, args: tuple
) -> Change:
    """The call with each of `chosen` made."""
    for step in chosen:
        options, args = step.change(options, args)
    return Change("; ".join(s.words for s in chosen), names, options, args)


def donatable(
    args: tuple, out_info: Any, static: tuple[int, ...], options: dict
) -> tuple[int, ...]:
    """The positions of the arguments to donate, in order."""
    import jax

    left = collections.Counter(_shape(o) for o in jax.tree.leaves(out_info))
    donated = set(_numbers(options))
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


def _jit_name(fun: Callable) -> str:
    """What the user wrote to jit it: Flax NNX's nnx.jit hands JAX a function
    object of its own, which wraps theirs; else jax.jit."""
    return "nnx.jit" if type(fun).__module__.startswith("flax.nnx") else "jax.jit"


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


def _split_over(args: tuple, positions: tuple[int, ...], chips: int) -> bool:
    """Whether most of the state's bytes are split over all the slice's chips
    already (an optimizer's step count or a bias may stay whole)."""
    import jax

    leaves = [a for i in positions for a in jax.tree.leaves(args[i]) if hasattr(a, "shape")]
    total = split = 0
    for a in leaves:
        size = math.prod(a.shape) * a.dtype.itemsize
        total += size
        sharding = _sharding(a)
        if sharding is not None and not sharding.is_fully_replicated:
            split += size if len(sharding.device_set) >= chips else 0
    return total > 0 and split >= SPLIT_SHARE * total


def _sharded(args: tuple, positions: tuple[int, ...], devices: tuple[Any, ...]) -> tuple:
    """`args` on a mesh of all `devices`: the arrays at `positions` split along
    their first dimension the devices' count divides, the others along their
    leading one where it divides; the rest replicated."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(devices), ("fsdp",))
    chips = len(devices)

    def placed(a: Any, state: bool) -> Any:
        if not hasattr(a, "shape"):
            return a
        # State: its first dimension the chips divide; anything else: its leading one.
        dims = range(len(a.shape) if state else min(1, len(a.shape)))
        axis = next((d for d in dims if d < len(a.shape) and a.shape[d] % chips == 0), None)
        spec: list[str | None] = [None] * len(a.shape)
        if axis is not None:
            spec[axis] = "fsdp"
        sharding = NamedSharding(mesh, PartitionSpec(*spec))
        return jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding)

    return tuple(
        jax.tree.map(lambda a, i=i: placed(a, i in positions), x) for i, x in enumerate(args)
    )


def _unpinned(options: dict) -> dict:
    """jax.jit's options without the shardings it pinned (the change's own rule)."""
    return {k: v for k, v in options.items() if k not in ("in_shardings", "out_shardings")}


def _bfloat16(args: tuple, positions: tuple[int, ...]) -> tuple | None:
    """`args` with the float32 arrays at `positions` as bfloat16 shapes; None
    where there are none."""
    import jax
    import jax.numpy as jnp

    found = []

    def cast(a: Any) -> Any:
        if getattr(a, "dtype", None) == jnp.float32 and hasattr(a, "shape"):
            found.append(a)
            return jax.ShapeDtypeStruct(a.shape, jnp.bfloat16, sharding=_sharding(a))
        return a

    changed = tuple(jax.tree.map(cast, a) if i in positions else a for i, a in enumerate(args))
    return changed if found else None


def _scaled_batch(args: tuple, kept: set[int], factor: float) -> tuple[tuple, int] | None:
    """(`args` with the batch times `factor`, the batch) where a batch is found:
    the leading dimension most of the other array arguments share (even, to be
    halved; a random key's is none). Where the batch is split over chips and
    the new one is not divisible so, it is whole on each."""
    import jax

    leading = collections.Counter(
        a.shape[0]
        for i, argument in enumerate(args)
        if i not in kept
        for a in jax.tree.leaves(argument)
        if getattr(a, "shape", None) and not _key(a)
    )
    if not leading:
        return None
    batch, _ = leading.most_common(1)[0]
    if batch < 2 or (factor < 1 and batch % 2):
        return None
    size = int(batch * factor)

    def scale(a: Any) -> Any:
        if getattr(a, "shape", None) and a.shape[0] == batch and not _key(a):
            shape = (size, *a.shape[1:])
            return jax.ShapeDtypeStruct(shape, a.dtype, sharding=_divisible(a, size))
        return a

    scaled = tuple(a if i in kept else jax.tree.map(scale, a) for i, a in enumerate(args))
    return scaled, batch


def _key(a: Any) -> bool:
    """A random key: a typed key array, or a raw one (uint32[2])."""
    import jax

    dtype = getattr(a, "dtype", None)
    raw = str(dtype) == "uint32" and tuple(a.shape) == (2,)
    return raw or (dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key))


def _divisible(a: Any, size: int) -> Any:
    """`a`'s sharding for a leading dimension of `size`: its own, but where that
    splits the leading dimension over more devices than divide `size`, whole."""
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = _sharding(a)
    if not isinstance(sharding, NamedSharding) or not sharding.spec:
        return sharding
    axes = sharding.spec[0]
    names = (axes,) if isinstance(axes, str) else tuple(axes or ())
    ways = math.prod(sharding.mesh.shape[n] for n in names)
    if size % ways == 0:
        return sharding
    return NamedSharding(sharding.mesh, PartitionSpec(None, *sharding.spec[1:]))


def _sharding(a: Any) -> Any:
    """A shape's sharding (a stand-in's; None, a fresh array's, leaves it to XLA:TPU)."""
    return getattr(a, "sharding", None)


def _names(options: dict) -> tuple[str, ...]:
    names = options.get("donate_argnames", ())
    return (names,) if isinstance(names, str) else tuple(names or ())


def _numbers(options: dict) -> tuple[int, ...]:
    nums = options.get("donate_argnums", ())
    return (nums,) if isinstance(nums, int) else tuple(nums or ())


def _shape(array: Any) -> tuple[tuple[int, ...], str]:
    return tuple(array.shape), str(array.dtype)
