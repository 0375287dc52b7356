"""What tpumem knows of PyTorch/XLA as plain data (adapters/framework.py): its names,
how its allocator is set (read by the fit advice, the capacity model and compare
from the trace's metadata) and how its users write what the advice asks."""

from tpumem.adapters.framework import Framework
from tpumem.trace.framework_words import FrameworkWords
from tpumem.trace.memory_settings import GrowthSetting, MemorySettings

FRAMEWORK = Framework(
    name="torch_xla",
    module="torch_xla",
    import_names=("torch_xla",),
    memory_settings=MemorySettings(
        # PJRT preallocates 75% of a GPU unless told otherwise.
        fraction_variable="PJRT_ALLOCATOR_FRACTION",
        default_fraction=0.75,
        growth_settings=(GrowthSetting("PJRT_ALLOCATOR_PREALLOCATE", ("false", "0")),),
    ),
    words=FrameworkWords(
        title="PyTorch/XLA",
        remat="torch.utils.checkpoint",
        one_moment_optimizer="torch.optim.SGD(params, lr, momentum=0.9)",
        batch="the DataLoader's batch_size",
        accumulate="two backward passes for each optimizer.step()",
        host_copy="x.cpu()",
    ),
)
