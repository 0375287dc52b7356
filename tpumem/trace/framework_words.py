"""How a framework's users write what the advice asks of them: the words its
adapter declares (adapters/<framework>/framework.py) and writes into the trace's
metadata beside its memory settings, so that a report words a change in the
framework's own terms without naming the framework.

Plain data, checked when read like every field of the metadata (records.py).
Traces written before adapters wrote their words read them from the table below.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FrameworkWords:
    title: str | None = None  # the framework's name as its users write it: "PyTorch/XLA"
    # How its users recompute a function's values in the backward pass.
    remat: str | None = None
    # An optimizer that keeps one value a parameter (Adam keeps two).
    one_moment_optimizer: str | None = None
    # Where its users set the batch a step takes.
    batch: str | None = None
    # How they keep the batch the optimizer sees while each step takes half of it.
    accumulate: str | None = None
    # How they copy an array to host memory (what a kept history can hold instead).
    host_copy: str | None = None
    # Where a program's temporaries are put at lines, where not at the lines XLA's
    # metadata gives them (the adapter recorded each op's own line).
    program_lines: str | None = None


# The words declared after adapters began writing theirs: a trace written before
# one lacks it, and reads it as declared then (records.filled_since). None yet.
WORDS_ADDED_SINCE: tuple[str, ...] = ()

# What the adapters declared when they began writing their words (2026-12-05): a
# trace recorded before (tests/data, the demo), or a profile imported, which no
# adapter recorded, reads them from here by its framework's name. A change to an
# adapter's words changes the traces recorded after it, never this table.
WORDS_BEFORE_WRITTEN = {
    "jax": FrameworkWords(
        title="JAX",
        remat="jax.checkpoint",
        one_moment_optimizer="optax.sgd(lr, momentum=0.9)",
        batch="the leading dimension of the step's inputs",
        accumulate="optax.MultiSteps(optimizer, every_k_schedule=2)",
        host_copy="jax.device_get(x)",
    ),
    "tensorflow": FrameworkWords(
        title="TensorFlow",
        remat="tf.recompute_grad",
        one_moment_optimizer="keras.optimizers.SGD(momentum=0.9)",
        batch="tf.data's .batch(n), or where the script makes its batch",
        accumulate="the Keras optimizer's gradient_accumulation_steps=2",
        host_copy="x.numpy()",
        program_lines="at the lines their ops were built at, as the adapter recorded them",
    ),
    "torch_xla": FrameworkWords(
        title="PyTorch/XLA",
        remat="torch.utils.checkpoint",
        one_moment_optimizer="torch.optim.SGD(params, lr, momentum=0.9)",
        batch="the DataLoader's batch_size",
        accumulate="two backward passes for each optimizer.step()",
        host_copy="x.cpu()",
    ),
    # PyTorch (imported snapshots, on CUDA or from torch.profiler on the host).
    "pytorch": FrameworkWords(
        title="PyTorch",
        remat="torch.utils.checkpoint",
        one_moment_optimizer="torch.optim.SGD(params, lr, momentum=0.9)",
        batch="the DataLoader's batch_size",
        accumulate="two backward passes for each optimizer.step()",
        host_copy="x.cpu()",
    ),
}
