"""How JAX's allocator is set (XLA's client on a GPU): read by the fit advice,
the capacity model and compare from the trace's metadata."""

from tpumem.trace.memory_settings import GrowthSetting, MemorySettings

MEMORY_SETTINGS = MemorySettings(
    # JAX preallocates 75% of a GPU unless told otherwise.
    fraction_variable="XLA_CLIENT_MEM_FRACTION",
    default_fraction=0.75,
    growth_settings=(
        GrowthSetting("XLA_PYTHON_CLIENT_PREALLOCATE", ("false", "0")),
        GrowthSetting("XLA_PYTHON_CLIENT_ALLOCATOR", ("platform",)),  # malloc per buffer
    ),
    # Each buffer malloc'ed and freed on its own: no pool to fragment (and slower).
    defragment_setting="XLA_PYTHON_CLIENT_ALLOCATOR=platform",
    # jax.jit(f, donate_argnums=...): the outputs take the donated arguments' buffers.
    donation="donate_argnums",
)
