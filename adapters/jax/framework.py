"""What tpumem knows of JAX as plain data (adapters/framework.py): its names,
how its allocator is set (read by the fit advice, the capacity model and compare
from the trace's metadata) and how its users write what the advice asks."""

from tpumem.adapters.framework import Framework
from tpumem.trace.framework_words import FrameworkWords
from tpumem.trace.memory_settings import GrowthSetting, MemorySettings

FRAMEWORK = Framework(
    name="jax",
    module="jax",
    import_names=("jax", "jaxlib", "flax", "optax", "equinox", "haiku", "orbax"),
    imported_by=("tensorflow",),
    memory_settings=MemorySettings(
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
    ),
    words=FrameworkWords(
        title="JAX",
        remat="jax.checkpoint",
        one_moment_optimizer="optax.sgd(lr, momentum=0.9)",
        batch="the leading dimension of the step's inputs",
        accumulate="optax.MultiSteps(optimizer, every_k_schedule=2)",
        host_copy="jax.device_get(x)",
    ),
)
