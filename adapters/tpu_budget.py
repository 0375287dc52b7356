"""How many bytes of a chip XLA:TPU lets one program use: measured from libtpu
itself, in the compile process (tpu_compile.py), never taken from a datasheet.

XLA:TPU refuses a program whose HBM plan does not fit with a line that names the
budget rounded to hundredths of a GiB ("exceeds available HBM (15.75G)"; on v5e
that is 256 MiB under the datasheet's 16 GiB). The exact figure is found the way
XLA:TPU decides: the largest program of one int8 argument it still compiles,
bisected inside the window the refusal names (about 15 compiles of a few
milliseconds each). The budget is that program's need as tpumem counts a
program's need (its HBM plan: argument, output and temporaries, plus its
generated code), so a need at or under it compiled and one over it did not.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tpumem.hlo.refusals import MARK, refusal

_HUGE = 1 << 40  # bytes no TPU chip has: always refused, and the refusal names the budget
_STEP = 512  # XLA:TPU's allocations grow in steps of this: finer bisection finds nothing


@dataclass(frozen=True, slots=True)
class Budget:
    usable_bytes: int  # the largest need XLA:TPU compiles on one chip
    seconds: float


def measure(device: Any) -> Budget:
    """The budget of one chip like `device` (a compile-only TPU device)."""
    start = time.perf_counter()

    def need(size: int) -> int | None:
        """The probe's need where XLA:TPU compiles it; None where it refuses."""
        outcome = _probe(device, size)
        return outcome if isinstance(outcome, int) else None

    refused = _probe(device, _HUGE)
    low, high = 1, _HUGE
    named = refusal(refused) if isinstance(refused, str) else None
    if named is not None and named.available is not None:
        centre, half = named.available.bytes, named.available.rounding_bytes + 1
        low, high = max(1, centre - half), centre + half
        if need(low) is None:
            low = 1
        if need(high) is not None:
            high = _HUGE
    while high - low > _STEP:
        middle = (low + high) // 2
        if need(middle) is None:
            high = middle
        else:
            low = middle
    usable = need(low)
    return Budget(usable or 0, time.perf_counter() - start)


def _probe(device: Any, size: int) -> int | str:
    """A program that reads `size` bytes of one argument: its need where XLA:TPU
    compiles it, else XLA:TPU's refusal."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    spec = jax.ShapeDtypeStruct((size,), jnp.int8, sharding=SingleDeviceSharding(device))
    try:
        compiled = jax.jit(lambda x: x.sum()).lower(spec).compile()
    except Exception as error:  # XlaRuntimeError (RESOURCE_EXHAUSTED) on a refusal
        if MARK not in str(error):
            raise
        return str(error)
    stats = compiled.memory_analysis()
    if stats is None:  # (XLA:TPU analyses every program it compiles)
        raise RuntimeError("XLA:TPU gave no memory analysis of its probe")
    return (
        stats.argument_size_in_bytes
        + stats.output_size_in_bytes
        - stats.alias_size_in_bytes
        + stats.temp_size_in_bytes
        + stats.generated_code_size_in_bytes
    )


def budget_row(topology: str, device: Any, libtpu: str) -> str:
    """The `tpu` row of the budget measured on `device` (`libtpu`: its release, as
    the parent names it: the key of its cache)."""
    from tpumem.trace.tpu_rows import TpuBudget, budget_row_text

    budget = measure(device)
    row = TpuBudget(topology, budget.usable_bytes, libtpu, device.device_kind, budget.seconds)
    return budget_row_text(row)
