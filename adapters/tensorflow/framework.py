"""What tpumem knows of TensorFlow as plain data (adapters/framework.py): its names,
how its allocator is set (read by the fit advice, the capacity model and compare
from the trace's metadata) and how its users write what the advice asks."""

from tpumem.adapters.framework import Framework
from tpumem.trace.framework_words import FrameworkWords
from tpumem.trace.memory_settings import GrowthSetting, MemorySettings

FRAMEWORK = Framework(
    name="tensorflow",
    module="tensorflow",
    import_names=("tensorflow", "keras", "tf_keras"),
    memory_settings=MemorySettings(
        # A logical device's memory_limit, in MiB: TensorFlow has no share to set.
        limit_mib_setting="memory_limit",
        growth_settings=(
            GrowthSetting("TF_FORCE_GPU_ALLOW_GROWTH", ("true",)),
            # tf.config.experimental.set_memory_growth, per GPU ("GPU:0 memory growth").
            GrowthSetting("memory growth", ("true",), name_ends=True),
        ),
        no_program="no XLA program: TensorFlow compiles with XLA only functions with "
        "jit_compile=True",
        # CUDA's own stream-ordered allocator in place of TensorFlow's BFC pool.
        defragment_setting="TF_GPU_ALLOCATOR=cuda_malloc_async",
    ),
    words=FrameworkWords(
        title="TensorFlow",
        remat="tf.recompute_grad",
        one_moment_optimizer="keras.optimizers.SGD(momentum=0.9)",
        batch="tf.data's .batch(n), or where the script makes its batch",
        accumulate="the Keras optimizer's gradient_accumulation_steps=2",
        host_copy="x.numpy()",
        # Its adapter records the line each op was built at (TensorFlow's own
        # traceback): a program's temporaries are put at those.
        program_lines="at the lines their ops were built at, as the adapter recorded them",
    ),
)
