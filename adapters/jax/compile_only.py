"""`tpumem fit`: a JAX script compiled for a TPU slice by XLA:TPU, never run.

Installed as the script's `import jax` finishes (fit_runner.py), it changes what
the script sees, and the report says so:
- `jax.devices()` (and local_devices, device_count, the meshes built on them)
  are the slice's compile-only TPU devices, so the script's own sharding code
  lays its arrays out over the slice;
- each call of a jitted function is lowered and compiled for those devices
  (never for the CPU) and returns shaped stand-ins (jax.ShapeDtypeStruct, with
  the shardings XLA:TPU chose) instead of running: the next jitted call takes
  them as its arguments, so a training loop compiles its step once and goes on;
  a value the script reads (float(loss), printing an element) stops it there;
- `jax.device_put` onto the slice gives stand-ins; `.lower(...).compile()`
  called by the script itself compiles for the slice too, and is recorded.
Arrays the script makes outside any jitted function are made on the CPU, as
they would be on a host. Arrays given to a jitted call without a sharding are
uncommitted, as a fresh array is: XLA:TPU places them with the others (on the
first chip where nothing decides).

Each distinct compile is written as soon as it is done (a `tpu` row: XLA:TPU's
memory analysis and its optimized HLO with the buffer assignment, or its
refusal whole), so a killed fit keeps what it compiled.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from tpumem.trace.tpu_rows import TpuCompile, compile_row_text

# The dump XLA writes for every compile (fit_runner.py sets XLA_FLAGS for it).
_AFTER = ".after_optimizations.hlo.pb"


class CompileOnly:
    """The process's compiles for one slice, and the patches that make them."""

    def __init__(self, topology: str, devices: list[Any], out: Any, dump_dir: str) -> None:
        self.topology = topology
        self.devices = devices
        self._out = out  # the rows' file, a line each
        self._dump = dump_dir
        self._seen_dumps: set[str] = set()
        self._count = 0
        self.compiled: list[TpuCompile] = []
        # Every stand-in handed to the script: those it still holds are counted
        # beside a program's arguments (no weak references to a ShapeDtypeStruct:
        # held means referenced from somewhere but this list).
        self._made: list[Any] = []

    # -- the patches ---------------------------------------------------------
    def install(self) -> None:
        import jax

        self._original_jit = jax.jit
        self._original_device_put = jax.device_put
        tpu = self.devices

        def devices(backend: Any = None) -> list[Any]:
            return list(tpu) if backend in (None, "tpu") else original_devices(backend)

        def count(backend: Any = None) -> int:
            return len(devices(backend))

        original_devices = jax.devices

        def local_devices(process_index: Any = None, backend: Any = None, **_: Any) -> list:
            return devices(backend)

        # The script asks jax; its eager arrays stay on the host's CPU (xla_bridge's
        # own devices), and the mesh helpers, which ask xla_bridge, get the slice.
        for name, value in (
            ("devices", devices),
            ("local_devices", local_devices),
            ("device_count", count),
            ("local_device_count", count),
        ):
            setattr(jax, name, value)
        from jax.experimental import mesh_utils

        for module, name in (
            (jax, "make_mesh"),
            (mesh_utils, "create_device_mesh"),
            (mesh_utils, "create_hybrid_device_mesh"),
        ):
            if hasattr(module, name):
                setattr(module, name, _on_devices(getattr(module, name), tpu))
        jax.jit = self.jit  # type: ignore[assignment]
        jax.device_put = self.device_put  # type: ignore[assignment]
        original_block = jax.block_until_ready
        jax.block_until_ready = lambda x: x if _holds_stand_ins(x) else original_block(x)

    def jit(self, fun: Callable | None = None, **options: Any) -> Any:
        if fun is None:  # @jax.jit(static_argnums=...) and partial(jax.jit, ...)
            return lambda f: self.jit(f, **options)
        return _Jitted(self, self._original_jit(fun, **options), fun)

    def device_put(self, x: Any, device: Any = None, *args: Any, **kwargs: Any) -> Any:
        import jax

        if device is None or not self._on_slice(device):
            return self._original_device_put(x, device, *args, **kwargs)
        sharding = device
        if not hasattr(device, "device_set"):  # one device: its own sharding
            sharding = jax.sharding.SingleDeviceSharding(device)
        return self.made(jax.tree.map(lambda a: _stand_in(a, sharding), x))

    def _on_slice(self, where: Any) -> bool:
        devices = getattr(where, "device_set", None) or [where]
        return any(getattr(d, "platform", "") == "tpu" for d in devices)

    # -- compiling -----------------------------------------------------------
    def specs(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The call's arrays as shapes: a stand-in as it is, an array made on the
        host uncommitted (XLA:TPU places it with the others)."""
        import jax
        import numpy as np

        def spec(x: Any) -> Any:
            if isinstance(x, jax.Array | np.ndarray) and not isinstance(x, jax.core.Tracer):
                return jax.ShapeDtypeStruct(x.shape, x.dtype)
            return x

        return jax.tree.map(spec, (args, kwargs))

    def lower(self, jitted: Any, args: tuple, kwargs: dict) -> Any:
        import jax

        args, kwargs = self.specs(args, kwargs)
        with jax.default_device(self.devices[0]):
            return jitted.lower(*args, **kwargs)

    def made(self, tree: Any) -> Any:
        """`tree`'s stand-ins, kept track of."""
        import jax

        self._made += [x for x in jax.tree.leaves(tree) if isinstance(x, jax.ShapeDtypeStruct)]
        return tree

    def held_beside(self, args: Any) -> int:
        """Bytes per chip of the stand-ins the script holds that are not in `args`."""
        import jax

        given = {id(x) for x in jax.tree.leaves(args)}
        # A reference from this list, one from getrefcount's argument: nothing else
        # (read by index: a loop variable would be one more).
        made = self._made
        self._made = [made[i] for i in range(len(made)) if sys.getrefcount(made[i]) > 2]
        return sum(_shard_bytes(x) for x in self._made if id(x) not in given)

    def compile(
        self, lowered: Any, name: str, chips: int, beside: int | None = None
    ) -> tuple[Any | None, TpuCompile]:
        """(XLA:TPU's executable or None where it refused, the row for it)."""
        self._count += 1
        base = TpuCompile(
            topology=self.topology,
            program_id=self._count,
            module=name,
            partitions=chips,
            device_kind=self.devices[0].device_kind,
            outside_bytes=beside,
        )
        start = time.perf_counter()
        try:
            compiled = lowered.compile()
        except Exception as error:  # XlaRuntimeError: RESOURCE_EXHAUSTED and others
            row = _replace(base, error=str(error).strip(), seconds=time.perf_counter() - start)
            self._record(row)
            return None, row
        stats = compiled.memory_analysis()
        memory = {}
        if stats is not None:
            memory = {
                "argument_bytes": stats.argument_size_in_bytes,
                "output_bytes": stats.output_size_in_bytes,
                "alias_bytes": stats.alias_size_in_bytes,
                "temp_bytes": stats.temp_size_in_bytes,
                "generated_code_bytes": stats.generated_code_size_in_bytes,
            }
        hlo = self._optimized()
        shardings = (compiled.input_shardings, compiled.output_shardings)
        row = _replace(
            base,
            module=_module_name(hlo) or name,
            partitions=max(chips, _chips(shardings)),
            memory=memory,
            seconds=time.perf_counter() - start,
            hlo=hlo,
        )
        self._record(row)
        return compiled, row

    def _record(self, row: TpuCompile) -> None:
        self.compiled.append(row)
        self._out.write(compile_row_text(row) + "\n")
        self._out.flush()
        if row.error is None:
            said = f"compiled {row.module} in {row.seconds:.1f} s"
        else:
            said = f"XLA:TPU refused {row.module}: {row.error.splitlines()[0][:200]}"
        print(f"tpumem fit: {self.topology}: {said}", file=sys.stderr, flush=True)

    def _optimized(self) -> bytes | None:
        """The HloProto XLA:TPU dumped for the compile just done."""
        found = None
        for name in sorted(os.listdir(self._dump)):
            if name in self._seen_dumps:
                continue
            self._seen_dumps.add(name)
            if name.endswith(_AFTER):
                found = os.path.join(self._dump, name)
        if found is None:
            return None
        with open(found, "rb") as handle:
            return handle.read()


class _Jitted:
    """A jitted function whose calls compile for the slice and return stand-ins."""

    def __init__(self, owner: CompileOnly, jitted: Any, fun: Callable) -> None:
        self._owner = owner
        self._jitted = jitted
        self._name = "jit_" + getattr(fun, "__name__", "fun").replace("<lambda>", "_lambda_")
        self._answers: dict[Any, Any] = {}
        self.__wrapped__ = fun
        self.__name__ = getattr(fun, "__name__", "fun")
        self.__doc__ = getattr(fun, "__doc__", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._jitted, name)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # A jitted method: bound like the function it wraps.
        if instance is None:
            return self
        return lambda *args, **kwargs: self(instance, *args, **kwargs)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        lowered = self._owner.lower(self._jitted, args, kwargs)
        return _Lowered(self._owner, lowered, self._name, _chips(args, kwargs))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import jax

        specs = self._owner.specs(args, kwargs)
        key = _signature(specs)
        if key is not None and key in self._answers:
            return self._owner.made(_fresh(self._answers[key]))  # the step again: compiled once
        lowered = self._owner.lower(self._jitted, args, kwargs)
        beside = self._owner.held_beside((args, kwargs))
        compiled, _ = self._owner.compile(lowered, self._name, _chips(specs), beside)
        if compiled is not None:
            answer = jax.tree.map(_out_stand_in, compiled.out_info, compiled.output_shardings)
        else:  # refused: the shapes it would have made, so the script goes on
            answer = jax.tree.map(_shape_of, lowered.out_info)
        if key is not None:
            self._answers[key] = answer
        # Stand-ins of their own for each call: the cache holds none the script holds.
        return self._owner.made(_fresh(answer))


class _Lowered:
    """The script's own `.lower(...)`: its `.compile()` is XLA:TPU's, recorded."""

    def __init__(self, owner: CompileOnly, lowered: Any, name: str, chips: int) -> None:
        self._owner, self._lowered, self._name, self._chips = owner, lowered, name, chips

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lowered, name)

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        if args or kwargs:  # compiler options: XLA:TPU's, as asked, unrecorded
            return self._lowered.compile(*args, **kwargs)
        compiled, row = self._owner.compile(self._lowered, self._name, self._chips)
        if compiled is None:
            raise RuntimeError(row.error)  # what the script's own compile would raise
        return compiled


def _on_devices(make: Callable, devices: list[Any]) -> Callable:
    """A mesh helper whose devices default to the slice's."""

    def made(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("devices") is None and "devices" in _parameters(make)[len(args) :]:
            kwargs["devices"] = devices
        return make(*args, **kwargs)

    return made


def _parameters(function: Callable) -> list[str]:
    import inspect

    try:
        return list(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return []


def _replace(row: TpuCompile, **changes: Any) -> TpuCompile:
    from dataclasses import replace

    return replace(row, **changes)


def _stand_in(array: Any, sharding: Any) -> Any:
    import jax
    import numpy as np

    return jax.ShapeDtypeStruct(np.shape(array), np.result_type(array), sharding=sharding)


def _out_stand_in(info: Any, sharding: Any) -> Any:
    import jax

    # On the first chip because nothing decided otherwise: uncommitted, as a fresh
    # array is, so that the next call places it with its other arguments.
    if isinstance(sharding, jax.sharding.SingleDeviceSharding):
        sharding = None
    return jax.ShapeDtypeStruct(info.shape, info.dtype, sharding=sharding)


def _fresh(tree: Any) -> Any:
    import jax

    def copy(x: Any) -> Any:
        return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)

    return jax.tree.map(copy, tree)


def _shard_bytes(x: Any) -> int:
    """One chip's shard of a stand-in, at its shape's bytes."""
    import math

    import numpy as np

    shape = tuple(x.shape)
    sharding = x.sharding
    if sharding is not None and hasattr(sharding, "shard_shape"):
        with contextlib.suppress(ValueError, TypeError):  # (one that does not divide it)
            shape = tuple(sharding.shard_shape(shape))
    return math.prod(shape) * np.dtype(x.dtype).itemsize


def _shape_of(info: Any) -> Any:
    """A refused program's output: its shape, and its sharding where the jit
    named one (so the next call is the same compile, not another refusal)."""
    import jax

    sharding = getattr(info, "sharding", None)
    if not isinstance(sharding, jax.sharding.Sharding):
        sharding = None
    return _out_stand_in(info, sharding)


def _holds_stand_ins(x: Any) -> bool:
    import jax

    return any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in jax.tree.leaves(x))


def _signature(specs: Any) -> Any:
    """What makes two calls one compile: the tree, each array's shape, dtype and
    sharding, and every other leaf's value (None where one cannot be a key)."""
    import jax

    leaves, tree = jax.tree.flatten(specs)
    key: list[tuple] = []
    for leaf in leaves:
        if isinstance(leaf, jax.ShapeDtypeStruct):
            key.append(("array", leaf.shape, str(leaf.dtype), leaf.sharding))
        else:
            key.append(("value", type(leaf).__name__, leaf))
    try:
        hash((tree, tuple(key)))
    except TypeError:
        return None
    return tree, tuple(key)


def _chips(*trees: Any) -> int:
    """How many of the slice's chips the program spans: the devices of the
    shardings in `trees` (its arguments, or XLA:TPU's own shardings for it)."""
    import jax

    found: set[Any] = set()
    for leaf in jax.tree.leaves(trees, is_leaf=lambda x: hasattr(x, "device_set")):
        sharding = leaf if hasattr(leaf, "device_set") else getattr(leaf, "sharding", None)
        found |= set(getattr(sharding, "device_set", ()) or ())
    return max(1, len([d for d in found if getattr(d, "platform", "") == "tpu"]))


def _module_name(hlo: bytes | None) -> str | None:
    if hlo is None:
        return None
    from tpumem.hlo.schema import HloError, parse_hlo_proto

    try:
        return parse_hlo_proto(hlo).hlo_module.name or None
    except HloError:
        return None
