"""What `--tpu` learned from XLA:TPU, as `tpu` rows: one per program compiled for a
topology (XLA:TPU's memory analysis, its optimized HloProto with the TPU buffer
assignment, the compile's seconds, or why it failed), and one per topology with
the bytes each array shape of the run takes in its TPU layout, and one with the
bytes of a chip XLA:TPU lets a program use (its budget, measured from libtpu)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tpumem.trace.hlo_rows import pack, unpack
from tpumem.trace.model import Trace
from tpumem.trace.records import parse_object
from tpumem.trace.schema import TPU

MAX_ERROR = 64 * 1024  # of XLA's message for a program it did not compile
# A hostile row's regions: no more than a program's arguments could be, each a word.
MAX_REGIONS, MAX_REGION = 1 << 20, 64
MEMORY_FIELDS = (
    "argument_bytes",
    "output_bytes",
    "alias_bytes",
    "temp_bytes",
    "generated_code_bytes",
)


def memory_fields(stats: object) -> dict[str, int]:
    """XLA's memory analysis of a compiled program (`compiled.memory_analysis()`,
    None where it gave none) as a row's MEMORY_FIELDS."""
    if stats is None:
        return {}
    return {
        name: getattr(stats, name.replace("_bytes", "_size_in_bytes")) for name in MEMORY_FIELDS
    }


# The words of fit's search for its state sharded over the slice's chips (FSDP),
# which the report reads: a refusal that stands then needs a larger slice.
SHARDED_OVER = "sharded over the slice's"
# ...and for a scan's steps recomputed: its cost is then the operations added.
RECOMPUTED = "recomputed in the backward pass"


@dataclass(frozen=True, slots=True)
class TpuCompile:
    """One program compiled for a TPU topology."""

    topology: str
    program_id: int | None  # the run's program (its dump's module number)
    module: str
    partitions: int
    device_kind: str = ""
    memory: dict[str, int] = field(default_factory=dict)  # MEMORY_FIELDS, per chip
    seconds: float = 0.0
    hlo: bytes | None = None  # XLA:TPU's optimized HloProto, buffer assignment included
    error: str | None = None
    # `tpumem fit`: bytes per chip of the script's other arrays (stand-ins it still
    # held, not this call's arguments) when the program was first called.
    outside_bytes: int | None = None
    # A program the topology refused: the topology of the diagnostic compile whose
    # plan `hlo` holds (a larger chip's, to show what fills it; not the target's).
    diagnostic: str | None = None
    # `tpumem fit`: the region the framework's objects give each of the call's
    # array arguments, in order ("" where none does; adapters/jax/tree_kinds.py).
    argument_regions: tuple[str, ...] | None = None
    # `tpumem fit`: a change tpumem compiled in place of the script's program to
    # see what would fit, as the user writes it (`donate_argnames=('params',)`);
    # such a compile is a candidate, none of the script's programs.
    change: str | None = None
    # ...the arguments the change names (their Python names), and the program it
    # was compiled in place of (its program_id).
    change_names: tuple[str, ...] | None = None
    change_of: int | None = None
    # `tpumem fit`: XLA's cost analysis of the compiled program, floating-point
    # operations per chip (what recomputing costs, a candidate's against its
    # program's).
    flops: float | None = None
    # `tpumem fit --sweep`: read back from an earlier point's compile of the same
    # program (no compile here: its seconds are 0).
    reused: bool = False


@dataclass(frozen=True, slots=True)
class TpuLayouts:
    """Bytes per array of each (dims, dtype) in the topology's TPU layout."""

    topology: str
    sizes: dict[tuple[tuple[int, ...], str], int]
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class TpuBudget:
    """The most one program may need on a chip of the topology, as XLA:TPU
    decides (adapters/tpu_budget.py), and the libtpu that decided it."""

    topology: str
    usable_bytes: int
    libtpu: str  # libtpu's version
    device_kind: str = ""
    seconds: float = 0.0  # 0 where it came from tpumem's cache of earlier measures


def compile_row_text(compiled: TpuCompile) -> str:
    return json.dumps(
        {
            "topology": compiled.topology,
            "program_id": compiled.program_id,
            "module": compiled.module,
            "partitions": compiled.partitions,
            "device_kind": compiled.device_kind,
            "memory": compiled.memory,
            "seconds": compiled.seconds,
            "hlo_proto": None if compiled.hlo is None else pack(compiled.hlo),
            "error": compiled.error,
            **({} if compiled.outside_bytes is None else {"outside_bytes": compiled.outside_bytes}),
            **({} if compiled.diagnostic is None else {"diagnostic": compiled.diagnostic}),
            **(
                {}
                if compiled.argument_regions is None
                else {"argument_regions": list(compiled.argument_regions)}
            ),
            **({} if compiled.change is None else {"change": compiled.change}),
            **(
                {}
                if compiled.change_names is None
                else {"change_names": list(compiled.change_names)}
            ),
            **({} if compiled.change_of is None else {"change_of": compiled.change_of}),
            **({} if compiled.flops is None else {"flops": compiled.flops}),
            **({"reused": True} if compiled.reused else {}),
        }
    )


def layouts_row_text(layouts: TpuLayouts) -> str:
    arrays = [
        {"dims": list(dims), "dtype": dtype, "bytes": size}
        for (dims, dtype), size in layouts.sizes.items()
    ]
    return json.dumps({"topology": layouts.topology, "arrays": arrays, "seconds": layouts.seconds})


def budget_row_text(budget: TpuBudget) -> str:
    return json.dumps(
        {
            "topology": budget.topology,
            "budget": {
                "usable_bytes": budget.usable_bytes,
                "libtpu": budget.libtpu,
                "device_kind": budget.device_kind,
            },
            "seconds": budget.seconds,
        }
    )


def _int(value: object, default: int | None = None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class TpuHeld:
    """`tpumem fit`: a later call of a compiled program (a cached one, no compile
    of its own) with more of the script's arrays held beside it than at its
    first call (an EMA or a reference copy kept since): a chip holds those too."""

    topology: str
    program_id: int
    outside_bytes: int


def held_row_text(held: TpuHeld) -> str:
    return json.dumps(
        {
            "topology": held.topology,
            "held": {"program_id": held.program_id, "bytes": held.outside_bytes},
        }
    )


TpuRow = TpuCompile | TpuLayouts | TpuBudget | TpuHeld


def read_tpu_row(text: object) -> TpuRow | None:
    """A row's record; None for one cut short or not of this form."""
    record = parse_object(text)
    if record is None or not isinstance(record.get("topology"), str):
        return None
    seconds = record.get("seconds")
    seconds = float(seconds) if isinstance(seconds, int | float) else 0.0
    held = record.get("held")
    if isinstance(held, dict):
        program, size = _int(held.get("program_id")), _int(held.get("bytes"))
        if program is None or size is None or size < 0:
            return None
        return TpuHeld(record["topology"], program, size)
    budget = record.get("budget")
    if isinstance(budget, dict):
        usable = _int(budget.get("usable_bytes"))
        if usable is None or usable <= 0:
            return None
        return TpuBudget(
            record["topology"],
            usable,
            _str(budget.get("libtpu")),
            _str(budget.get("device_kind")),
            seconds,
        )
    if isinstance(record.get("arrays"), list):
        sizes = {}
        for array in record["arrays"]:
            if not isinstance(array, dict) or not isinstance(array.get("dims"), list):
                continue
            dims = tuple(d for d in array["dims"] if _int(d) is not None)
            size = _int(array.get("bytes"))
            if size is not None and len(dims) == len(array["dims"]):
                sizes[dims, _str(array.get("dtype"))] = size
        return TpuLayouts(record["topology"], sizes, seconds)
    memory = record.get("memory")
    if not isinstance(memory, dict):
        memory = {}
    error = record.get("error")
    return TpuCompile(
        topology=record["topology"],
        program_id=_int(record.get("program_id")),
        module=_str(record.get("module")) or "?",
        partitions=_int(record.get("partitions"), 1) or 1,
        device_kind=_str(record.get("device_kind")),
        memory={k: v for k in MEMORY_FIELDS if (v := _int(memory.get(k))) is not None},
        seconds=seconds,
        hlo=unpack(record.get("hlo_proto")),
        error=error if isinstance(error, str) else None,
        outside_bytes=_int(record.get("outside_bytes")),
        diagnostic=_str(record.get("diagnostic")) or None,
        argument_regions=_regions(record.get("argument_regions")),
        change=_str(record.get("change"))[:MAX_ERROR] or None,
        change_names=_regions(record.get("change_names")),
        change_of=_int(record.get("change_of")),
        flops=_flops(record.get("flops")),
        reused=record.get("reused") is True,
    )


def _flops(value: object) -> float | None:
    """A count of operations: a finite number, not negative."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _regions(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list) or len(value) > MAX_REGIONS:
        return None
    return tuple(r if isinstance(r, str) and len(r) <= MAX_REGION else "" for r in value)


def tpu_rows(trace: Trace) -> list[TpuRow]:
    """Every readable `tpu` row, in the order written."""
    rows = [read_tpu_row(t) for t in trace.texts_at(np.flatnonzero(trace.is_kind(TPU)))]
    return [row for row in rows if row is not None]
