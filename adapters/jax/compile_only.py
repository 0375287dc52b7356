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
Arrays the script makes outside any jitted function are made on the CPU (on a
TPU they would be on its first chip; what the script holds of them is not
counted, only the stand-ins). Arrays given to a jitted call without a sharding
are uncommitted, as a fresh array is: XLA:TPU places them with the others (on
the first chip where nothing decides). A jitted function called while JAX traces
another (jax.grad, vmap, a jit in a jit) is part of that program, as in JAX.

Each distinct compile is written as soon as it is done (a `tpu` row: XLA:TPU's
memory analysis and its optimized HLO with the buffer assignment, or its
refusal whole), so a killed fit keeps what it compiled.
"""

from __future__ import annotations

import contextlib
import sys
import time
import types
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from tpumem.adapters.jax import compile_cache, search, stand_ins, tree_kinds
from tpumem.adapters.tpu_compile import (
    diagnosed,
    flops_of,
    name_of,
    optimized_dump,
    partitions_of,
)
from tpumem.hlo.refusals import HBM, refusal
from tpumem.trace.tpu_rows import (
    MAX_ERROR,
    TpuCompile,
    TpuHeld,
    compile_row_text,
    held_row_text,
    memory_fields,
)


class CompileOnly:
    """The process's compiles for one slice, and the patches that make them."""

    def __init__(
        self,
        topology: str,
        devices: list[Any],
        out: Any,
        dump_dir: str,
        search: bool | None = None,
        diagnose: bool = True,
        cache: str | None = None,
    ) -> None:
        self.topology = topology
        # A sweep's directory of its earlier points' compiles (compile_cache.py).
        self._cache = cache
        # None: what fits searched where XLA:TPU refuses; False: never; True: and
        # where a step fits, the largest batch (search.py).
        self.search = search
        # A refusal compiled again on a larger chip, for what fills it (not in a
        # sweep, whose answer is the verdict; not where XLA's words list it).
        self.diagnose = diagnose
        self.devices = devices
        self._out = out  # the rows' file, a line each
        self._dump = dump_dir
        self._seen_dumps: set[str] = set()
        self._count = 0
        # Every stand-in handed to the script: those it still holds are counted
        # beside a program's arguments (no weak references to a ShapeDtypeStruct:
        # held means referenced from somewhere but this list).
        self._made: list[Any] = []
        # Each jitted function's compiles, by call signature: one compile however
        # many times the script calls it, and however many times it jits it.
        self.answers: dict[Any, dict[Any, Any]] = {}
        self.rows: dict[Any, dict[Any, list[int]]] = {}
        self._sizes: dict[Any, int] = {}  # a stand-in's shard bytes, by its kind

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
        self._original_pmap = jax.pmap
        jax.pmap = self.pmap  # type: ignore[assignment]
        # pjit is jit by another name (and its options are jit's): older code
        # imports it from here.
        from jax.experimental import pjit

        pjit.pjit = self.pjit  # type: ignore[assignment]
        jax.device_put = self.device_put  # type: ignore[assignment]
        original_block = jax.block_until_ready
        jax.block_until_ready = lambda x: x if stand_ins.holds_stand_ins(x) else original_block(x)

    def jit(self, fun: Callable | None = None, **options: Any) -> Any:
        if fun is None:  # @jax.jit(static_argnums=...) and partial(jax.jit, ...)
            return lambda f: self.jit(f, **options)
        return _Jitted(self, self._original_jit(fun, **options), fun, options)

    def pjit(self, fun: Callable, *shardings: Any, **options: Any) -> Any:
        """pjit, whose in_shardings and out_shardings may come by position."""
        named = dict(zip(("in_shardings", "out_shardings"), shardings, strict=False))
        return self.jit(fun, **named, **options)

    def pmap(self, fun: Callable | None = None, *axis: Any, **options: Any) -> Any:
        """jax.pmap over the slice's chips, compiled as a jitted call is (one
        replica a chip; the mapped axis is the script's device count); its
        axis_name may come by position."""
        if axis:
            options["axis_name"] = axis[0]
        if fun is None:
            return lambda f: self.pmap(f, **options)
        mapped = self._original_pmap(fun, **{"devices": list(self.devices), **options})
        static = options.get("static_broadcasted_argnums", ())
        own = {k: v for k, v in options.items() if k != "devices"}
        return _Jitted(self, mapped, fun, {**own, "static_argnums": static}, "pmap_")

    def device_put(self, x: Any, device: Any = None, *args: Any, **kwargs: Any) -> Any:
        import jax

        if stand_ins.has_tracers(x) or not self._on_slice(device):
            return self._original_device_put(x, device, *args, **kwargs)
        if isinstance(device, jax.sharding.Sharding) or not hasattr(device, "device_set"):
            where = device
            if not isinstance(device, jax.sharding.Sharding):  # one device: its sharding
                where = jax.sharding.SingleDeviceSharding(device)
            return self.made(jax.tree.map(lambda a: stand_ins.stand_in(a, where), x))
        # A tree of shardings, one per array.
        return self.made(jax.tree.map(stand_ins.stand_in, x, device))

    def _on_slice(self, where: Any) -> bool:
        import jax

        found = []
        for leaf in jax.tree.leaves(where, is_leaf=lambda x: hasattr(x, "device_set")):
            found += list(getattr(leaf, "device_set", None) or [leaf])
        return any(getattr(d, "platform", "") == "tpu" for d in found)

    # -- compiling -----------------------------------------------------------
    def specs(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """The call's arrays as shapes (stand_ins.spec)."""
        import jax

        return jax.tree.map(stand_ins.spec, (args, kwargs))

    def lower(self, jitted: Any, args: tuple, kwargs: dict) -> Any:
        import jax

        args, kwargs = self.specs(args, kwargs)
        with jax.default_device(self.devices[0]):
            return jitted.lower(*args, **kwargs)

    def made(self, tree: Any) -> Any:
        """`tree`'s stand-ins, kept track of."""
        import jax

        self._made += [x for x in jax.tree.leaves(tree) if isinstance(x, jax.ShapeDtypeStruct)]
        if len(self._made) > 4096:  # a loop of cached calls: those it let go, gone
            self._let_go()
        return tree

    def held_beside(self, args: Any) -> int:
        """Bytes per chip of the stand-ins the script holds that are not in `args`."""
        import jax

        given = {id(x) for x in jax.tree.leaves(args)}
        self._let_go()
        return sum(self._shard_bytes(x) for x in self._made if id(x) not in given)

    def _shard_bytes(self, x: Any) -> int:
        """stand_ins.shard_bytes, once a shape, dtype and sharding: a loop of
        cached calls asks again for the same stand-ins' sizes every call."""
        try:
            key = (tuple(x.shape), str(x.dtype), x.sharding)
            hash(key)
        except TypeError:
            return stand_ins.shard_bytes(x)
        size = self._sizes.get(key)
        if size is None:
            size = self._sizes[key] = stand_ins.shard_bytes(x)
        return size

    def held_again(self, row: list[int], args: Any) -> None:
        """A cached call: where the script holds more beside it than at any call
        before, a row that says so (a chip holds it while the program runs)."""
        beside = self.held_beside(args)
        if beside > row[1]:
            row[1] = beside
            self._out.write(held_row_text(TpuHeld(self.topology, row[0], beside)) + "\n")
            self._out.flush()

    def _let_go(self) -> None:
        # Held: referenced from somewhere but this list (read by index: a loop
        # variable would be one more reference).
        made = self._made
        self._made = [
            made[i] for i in range(len(made)) if sys.getrefcount(made[i]) > stand_ins.ALONE
        ]

    def compile(
        self,
        lowered: Any,
        name: str,
        chips: int,
        beside: int | None = None,
        regions: tuple[str, ...] | None = None,
        change: tuple[str, tuple[str, ...], int] | None = None,
        reuse: bool = False,
    ) -> tuple[Any | None, TpuCompile]:
        """(XLA:TPU's executable or None where it refused, the row for it);
        `change`: a candidate's (words, names) in place of the script's program;
        `reuse`: an earlier sweep point's compile of the same program will do
        (its outputs' shapes and shardings in place of the executable)."""
        directory = self._cache if reuse else None
        cached = compile_cache.key(lowered, self.topology, chips, self._dump) if directory else None
        if directory is not None and cached is not None:
            found = compile_cache.read(directory, cached, lowered, self.devices)
            if found is not None:
                self._count += 1
                reused, kept = found
                row = replace(
                    kept,
                    program_id=self._count,
                    outside_bytes=beside,
                    argument_regions=regions,
                    seconds=0.0,
                    reused=True,
                )
                self._record(row)
                return reused, row
        compiled, row = self._compiled(lowered, name, chips, beside, regions, change)
        if directory is not None and cached is not None:
            compile_cache.write(directory, cached, row, compiled)
        return compiled, row

    def _compiled(
        self,
        lowered: Any,
        name: str,
        chips: int,
        beside: int | None,
        regions: tuple[str, ...] | None,
        change: tuple[str, tuple[str, ...], int] | None,
    ) -> tuple[Any | None, TpuCompile]:
        self._count += 1
        base = TpuCompile(
            topology=self.topology,
            program_id=self._count,
            module=name,
            partitions=chips,
            device_kind=self.devices[0].device_kind,
            outside_bytes=beside,
            argument_regions=regions,
            change=change[0] if change else None,
            change_names=change[1] if change else None,
            change_of=change[2] if change else None,
        )
        start = time.perf_counter()
        try:
            compiled = lowered.compile()
        except Exception as error:  # XlaRuntimeError: RESOURCE_EXHAUSTED and others
            said = (str(error).strip() or type(error).__name__)[:MAX_ERROR]
            stablehlo = lowered.compiler_ir("stablehlo")
            row = replace(
                base,
                module=name_of(stablehlo) or name,
                partitions=partitions_of(stablehlo) or chips,
                error=said,
                seconds=time.perf_counter() - start,
            )
            self._record(row)  # (at once: a diagnostic compile may take long, or die)
            if change is None and self.diagnose:
                # (A candidate's refusal is its verdict: no diagnosis.)
                diagnosis = diagnosed(row, stablehlo, self._dump, self._seen_dumps)
                if diagnosis.diagnostic is not None:
                    self._write(diagnosis)
            else:
                optimized_dump(self._dump, self._seen_dumps, name)  # (not a later one's)
            return None, row
        memory = memory_fields(compiled.memory_analysis())
        flops = flops_of(compiled)
        hlo = optimized_dump(self._dump, self._seen_dumps, name)
        shardings = (compiled.input_shardings, compiled.output_shardings)
        row = replace(
            base,
            module=_module_name(hlo) or name,
            partitions=max(chips, _chips(shardings)),
            memory=memory,
            seconds=time.perf_counter() - start,
            hlo=hlo,
            flops=flops,
        )
        self._record(row)
        return compiled, row

    def _record(self, row: TpuCompile) -> None:
        self._write(row)
        self._say(row)

    def _write(self, row: TpuCompile) -> None:
        self._out.write(compile_row_text(row) + "\n")
        self._out.flush()

    def _say(self, row: TpuCompile) -> None:
        module = row.module if row.change is None else f"{row.module} with {row.change}"
        why = row.error.splitlines()[0][:200] if row.error else ""
        if row.reused:
            verdict = f"refused by XLA:TPU ({why})" if row.error else "compiled"
            said = f"{module}: {verdict} earlier in this sweep; not compiled again"
        elif row.error is None:
            said = f"compiled {module} in {row.seconds:.1f} s"
        else:
            did = "refused" if refusal(row.error) is not None else "did not compile"
            said = f"XLA:TPU {did} {module}: {why}"
        print(f"tpumem fit: {self.topology}: {said}", file=sys.stderr, flush=True)


class _Jitted:
    """A jitted function whose calls compile for the slice and return stand-ins."""

    def __init__(
        self, owner: CompileOnly, jitted: Any, fun: Callable, options: dict, prefix: str = "jit_"
    ) -> None:
        self._owner = owner
        self._jitted = jitted
        self._name = prefix + getattr(fun, "__name__", "fun").replace("<lambda>", "_lambda_")
        nums = options.get("static_argnums", ())
        names = options.get("static_argnames", ())
        self._static_nums = (nums,) if isinstance(nums, int) else tuple(nums or ())
        self._static_names = (names,) if isinstance(names, str) else tuple(names or ())
        try:
            key: Any = (fun, repr(sorted(options.items())))
            hash(key)
        except TypeError:
            key = id(self)
        self._answers = owner.answers.setdefault(key, {})
        # By call signature: [the compile's program id, the most held beside it].
        self._rows: dict[Any, list[int]] = owner.rows.setdefault(key, {})
        self._fun, self._options = fun, options
        self.__wrapped__ = fun
        self.__name__ = getattr(fun, "__name__", "fun")
        self.__doc__ = getattr(fun, "__doc__", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._jitted, name)

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        # A jitted method: bound like the function it wraps.
        return self if instance is None else types.MethodType(self, instance)

    def lower(self, *args: Any, **kwargs: Any) -> Any:
        if stand_ins.has_tracers((args, kwargs)):
            return self._jitted.lower(*args, **kwargs)
        lowered = self._owner.lower(self._jitted, args, kwargs)
        return _Lowered(self._owner, lowered, self._name, _chips(args, kwargs))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import jax

        if stand_ins.has_tracers((args, kwargs)):
            return self._jitted(*args, **kwargs)  # inside another program: traced into it
        specs = self._owner.specs(args, kwargs)
        key = stand_ins.signature(*specs, self._static_nums, self._static_names)
        if key is not None and key in self._answers:
            # The step again: compiled once; what the script holds beside it
            # may have grown since (a copy of the first state kept).
            self._owner.held_again(self._rows[key], (args, kwargs))
            return self._owner.made(stand_ins.fresh(self._answers[key]))
        lowered = self._owner.lower(self._jitted, args, kwargs)
        beside = self._owner.held_beside((args, kwargs))
        regions = self._regions(args, kwargs)
        compiled, row = self._owner.compile(
            lowered, self._name, _chips(specs), beside, regions, reuse=True
        )
        if key is not None:
            self._rows[key] = [row.program_id or 0, beside]
        said = refusal(row.error) if compiled is None and row.error else None
        searching = self._owner.search is not False and self._name.startswith("jit_")
        if searching and said is not None and said.space == HBM:
            # (Refused for its size in HBM: what would fit is searched; pmap's not.)
            self._searched(args, kwargs, lowered, beside, row.program_id or 0)
        elif searching and compiled is not None and self._owner.search and len(self._rows) <= 1:
            # (Its first call's shapes only: an epoch's smaller last batch is the same step.)
            self._larger(args, kwargs, lowered, beside, row.program_id or 0)
        if compiled is not None:
            answer = jax.tree.map(
                stand_ins.out_stand_in, compiled.out_info, compiled.output_shardings
            )
        else:  # not compiled: the shapes it would have made, so the script goes on
            answer = jax.tree.map(stand_ins.refused_out, lowered.out_info)
        answer = stand_ins.weak_as_lowered(answer, lowered)
        if key is not None:
            self._answers[key] = answer
        # Stand-ins of their own for each call: the cache holds none the script holds.
        return self._owner.made(stand_ins.fresh(answer))

    def _searched(
        self, args: tuple, kwargs: dict, lowered: Any, beside: int | None, refused: int
    ) -> None:
        """A refused program compiled again with the changes that shrink it
        (search.py): the first set that XLA:TPU compiles, made smaller where it
        can be. Each compile a candidate row, none of the script's programs."""
        import jax

        shapes = jax.tree.map(stand_ins.spec, args)
        static = self._static_nums
        jit = self._owner._original_jit
        scans = search.scan_lines(lambda: jit(self._fun, **self._options).trace(*shapes, **kwargs))
        found, names = search.steps(
            self._fun,
            shapes,
            lowered.out_info,
            static,
            self._options,
            self._static_names,
            tuple(self._owner.devices),
            scans,
        )

        def fits(chosen: tuple[search.Step, ...]) -> bool | None:
            change = search.combined(chosen, names, dict(self._options), shapes)
            try:
                with contextlib.ExitStack() as held:
                    for step in chosen:
                        if step.around is not None:
                            held.enter_context(step.around())
                    variant = jit(self._fun, **change.options)
                    relowered = self._owner.lower(variant, change.args, kwargs)
            except Exception:  # (a change JAX cannot lower here: left out)
                return None
            chips = _chips(change.args, kwargs)
            words = (change.words, change.names, refused)
            compiled, _ = self._owner.compile(relowered, self._name, chips, beside, None, words)
            return compiled is not None

        chosen: tuple[search.Step, ...] = ()
        for step in found:
            compiled = fits((*chosen, step))
            if compiled is None:
                continue
            chosen = (*chosen, step)
            if compiled:
                for tried in chosen[:-1]:  # the fewest costly changes: each not needed, out
                    if tried.free:
                        continue
                    fewer = tuple(s for s in chosen if s is not tried)
                    if fits(fewer):
                        chosen = fewer
                return

    def _larger(
        self, args: tuple, kwargs: dict, lowered: Any, beside: int | None, fitted: int
    ) -> None:
        """A step that compiled (fit --search), compiled again at twice its batch,
        and twice that, until XLA:TPU refuses: each a candidate row."""
        import jax

        shapes = jax.tree.map(stand_ins.spec, args)
        for larger in search.larger_batches(
            self._fun,
            shapes,
            lowered.out_info,
            self._static_nums,
            self._options,
            self._static_names,
        ):
            try:
                variant = self._owner._original_jit(self._fun, **self._options)
                relowered = self._owner.lower(variant, larger.args, kwargs)
            except Exception:  # (a batch JAX cannot lower: none larger tried)
                return
            chips = _chips(larger.args, kwargs)
            words = (larger.words, (), fitted)
            compiled, _ = self._owner.compile(relowered, self._name, chips, beside, None, words)
            if compiled is None:
                return

    def _regions(self, args: tuple, kwargs: dict) -> tuple[str, ...]:
        """What the framework's objects say each array argument is, in the order
        JAX flattens them (static arguments are no arguments of the program)."""
        import jax

        traced = (
            tuple(a for i, a in enumerate(args) if i not in self._static_nums),
            {k: v for k, v in kwargs.items() if k not in self._static_names},
        )
        leaves = jax.tree.leaves(traced)
        return tuple(r or "" for r in tree_kinds.told(traced, len(leaves)))


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
