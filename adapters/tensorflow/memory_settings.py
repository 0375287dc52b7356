"""How TensorFlow's allocator is set: read by the fit advice, the capacity model
and compare from the trace's metadata."""

from tpumem.trace.memory_settings import GrowthSetting, MemorySettings

MEMORY_SETTINGS = MemorySettings(
    # A logical device's memory_limit, in MiB: TensorFlow has no share to set.
    limit_mib_setting="memory_limit",
    growth_settings=(
        GrowthSetting("TF_FORCE_GPU_ALLOW_GROWTH", ("true",)),
        # tf.config.experimental.set_memory_growth, per GPU ("GPU:0 memory growth").
        GrowthSetting("memory growth", ("true",), name_ends=True),
    ),
    no_program="no XLA program: TensorFlow compiles with XLA only functions with jit_compile=True",
    # CUDA's own stream-ordered allocator in place of TensorFlow's BFC pool.
    defragment_setting="TF_GPU_ALLOCATOR=cuda_malloc_async",
)
