"""Runs a PyTorch script on PyTorch's fake tensors and nothing of tpumem, for as
many optimizer steps as `tpumem fit --gpu` runs: the anchor of fit_gpu.py, what
the fake tensors themselves cost.

    python benchmarks/fake_tensors_alone.py STEPS SCRIPT [SCRIPT ARGS]

A script that reads a value (`loss.item()`) cannot run on fake tensors at all,
so a value read gets 1, the least a run on fake tensors needs. What tpumem adds
on top: the dispatch mode that records each storage (its line
and stack, its rows), the module and optimizer hooks for the kinds, CUDA's
attention kernels and optimizer defaults, and the analysis of the trace after.
"""

from __future__ import annotations

import os
import runpy
import sys

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import TorchDispatchMode


class _Values(TorchDispatchMode):
    """Answers a value read (`.item()`) with 1; every other op as it is."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            return 1
        return func(*args, **(kwargs or {}))


def main() -> None:
    steps, script, *rest = sys.argv[1:]
    sys.argv = [script, *rest]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    done = [0]

    def stepped(optimizer: object, args: object, kwargs: object) -> None:
        done[0] += 1
        if done[0] >= int(steps):
            raise SystemExit(0)

    register_optimizer_step_post_hook(stepped)
    FakeTensorMode(allow_non_fake_inputs=True).__enter__()
    _Values().__enter__()
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
