"""How PyTorch/XLA's allocator is set (PJRT's, on a GPU): read by the fit
advice, the capacity model and compare from the trace's metadata."""

from tpumem.trace.memory_settings import GrowthSetting, MemorySettings

MEMORY_SETTINGS = MemorySettings(
    # PJRT preallocates 75% of a GPU unless told otherwise.
    fraction_variable="PJRT_ALLOCATOR_FRACTION",
    default_fraction=0.75,
    growth_settings=(GrowthSetting("PJRT_ALLOCATOR_PREALLOCATE", ("false", "0")),),
)
