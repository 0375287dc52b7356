"""What tpumem knows of plain PyTorch as plain data (adapters/framework.py): its
names, how its allocator is set and how its users write what the advice asks."""

from tpumem.adapters.framework import Framework
from tpumem.trace.framework_words import FrameworkWords
from tpumem.trace.memory_settings import CUDA_CACHING, NO_POOL, MemorySettings

# On CUDA (`tpumem fit --gpu`'s runs): the caching allocator takes segments as it
# needs them, up to the share of the GPU the script may set.
ON_CUDA = MemorySettings(
    fraction_function="torch.cuda.set_per_process_memory_fraction",
    defragment_setting="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    allocator_model=CUDA_CACHING,
)

FRAMEWORK = Framework(
    name="torch",
    module="torch",
    import_names=("torch", "torchvision", "lightning", "pytorch_lightning"),
    # PyTorch/XLA imports torch and runs on it: with torch_xla, the device memory
    # is PyTorch/XLA's (the import watch hands the recording over to it).
    imported_by=("torch_xla",),
    memory_settings=MemorySettings(
        # On the CPU, PyTorch's allocator is the C library's: each tensor's storage
        # is allocated and freed on its own, with no pool to fragment or round.
        allocator_model=NO_POOL,
        # What caps the share of a GPU the same script would take there.
        fraction_function="torch.cuda.set_per_process_memory_fraction",
    ),
    words=FrameworkWords(
        title="PyTorch",
        remat="torch.utils.checkpoint",
        one_moment_optimizer="torch.optim.SGD(params, lr, momentum=0.9)",
        batch="the DataLoader's batch_size",
        accumulate="two backward passes for each optimizer.step()",
        host_copy="x.cpu()",
    ),
)
