"""How a framework's allocator is set: the facts its adapter declares
(adapters/<framework>/memory_settings.py) and writes into the trace's metadata,
so that the analysis reads them there and names no framework.

Plain data, checked when read like every field of the metadata (records.py).
Traces written before adapters wrote these facts read them from the table below.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from tpumem.trace.records import filled_since


@dataclass(frozen=True, slots=True)
class GrowthSetting:
    """A setting (an environment variable, or one of the allocator's settings) that
    turns preallocation off: grown as needed, not all of a GPU up front."""

    name: str = ""
    values: tuple[str, ...] = ()  # lowercased, as the analysis compares them
    name_ends: bool = False  # any setting whose name ends with `name` (one per GPU)


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """What a framework's run needs for the fit advice, the capacity model and a
    comparison's programs, as its adapter declares it."""

    # The variable that sets the share of a GPU preallocated, and its default.
    fraction_variable: str | None = None
    # Where a function call sets the share instead (PyTorch): its name.
    fraction_function: str | None = None
    default_fraction: float | None = None
    # Where the pool is set as a limit in MiB instead of a share: the setting's name.
    limit_mib_setting: str | None = None
    growth_settings: tuple[GrowthSetting, ...] = ()
    # Why a run has no compiled program to show, and what to change; None: no advice.
    no_program: str | None = None
    # The setting, as written (NAME=value), with which the allocator's free memory
    # does not fragment (what the advice names where free memory was in pieces).
    defragment_setting: str | None = None
    # The model of the allocator that replays the run's events where its own
    # counters are not in the trace (CUDA_CACHING: PyTorch's caching allocator).
    allocator_model: str | None = None
    # How a compiled call is told to reuse its arguments' memory for its outputs,
    # where the framework lets its users say it (the donation advice's words).
    donation: str | None = None


CUDA_CACHING = "cuda caching allocator"
# No model: the trace's memory is held by no pool it recorded (the host's own
# allocator, in torch.profiler's conversion of a profile to a snapshot), so no
# pool, fragmentation or rounding is modeled for it.
NO_POOL = "none: no pool recorded"
# The facts declared after adapters began writing their settings into the trace
# (2026-12-05): a trace written before lacks them, and reads them as declared then.
ADDED_SINCE = ("allocator_model", "donation")


# What the adapters declared when they began writing these facts: traces recorded
# before (tests/data, the demo), and imported profiles, which no adapter recorded,
# read them from here by their framework's name. A change to an adapter's facts
# changes the traces recorded after it, never this table.
DECLARED_BEFORE_WRITTEN = {
    "jax": MemorySettings(
        fraction_variable="XLA_CLIENT_MEM_FRACTION",
        default_fraction=0.75,
        growth_settings=(
            GrowthSetting("XLA_PYTHON_CLIENT_PREALLOCATE", ("false", "0")),
            GrowthSetting("XLA_PYTHON_CLIENT_ALLOCATOR", ("platform",)),
        ),
        donation="donate_argnums",
    ),
    "tensorflow": MemorySettings(
        limit_mib_setting="memory_limit",
        growth_settings=(
            GrowthSetting("TF_FORCE_GPU_ALLOW_GROWTH", ("true",)),
            GrowthSetting("memory growth", ("true",), name_ends=True),
        ),
        no_program="no XLA program: TensorFlow compiles with XLA only functions with "
        "jit_compile=True",
    ),
    # PyTorch on CUDA (snapshots): its caching allocator takes segments as it needs
    # them, up to a share of the GPU the script may set.
    "pytorch": MemorySettings(
        fraction_function="torch.cuda.set_per_process_memory_fraction",
        defragment_setting="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
        allocator_model=CUDA_CACHING,
    ),
    "torch_xla": MemorySettings(
        fraction_variable="PJRT_ALLOCATOR_FRACTION",
        default_fraction=0.75,
        growth_settings=(GrowthSetting("PJRT_ALLOCATOR_PREALLOCATE", ("false", "0")),),
    ),
}


def declared_since(
    framework: str, written: MemorySettings | None, keys: Collection[str]
) -> MemorySettings | None:
    """The settings a trace holds, read as records.filled_since says (a JAX trace
    of last month still donates with donate_argnums)."""
    return filled_since(DECLARED_BEFORE_WRITTEN.get(framework), written, keys, ADDED_SINCE)
