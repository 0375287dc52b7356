"""The PyTorch/XLA examples' training loop, matching tf_common.py and jax_common.py:
Adam, each step marked for profilers (the models are torch_models.py's).

PyTorch/XLA is lazy: the ops of a step are traced into a graph, which runs when
the step ends (`xp.StepTrace` calls `torch_xla.sync()` on exit).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.profiler as xp
from model_config import BETAS, EPSILON, LEARNING_RATE, report
from torch import nn


def memory_peak(device: torch.device) -> int | None:
    """PyTorch/XLA's own peak for the device (None on the CPU, which keeps none)."""
    try:
        return int(xm.get_memory_info(device)["peak_bytes_used"])
    except (RuntimeError, KeyError):
        return None


def train(
    model_name: str,
    args: argparse.Namespace,
    model: nn.Module,
    loss_fn: Callable[..., torch.Tensor],
    *batch: torch.Tensor,
) -> None:
    """Moves the model and batch to the XLA device, trains with Adam, each step
    marked for profilers, and reports."""
    device = torch_xla.device()
    model = model.to(device)
    batch = tuple(t.to(device) for t in batch)
    counted = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, betas=BETAS, eps=EPSILON)
    start = first = time.perf_counter()
    first_cpu = time.process_time()
    for number in range(args.steps):
        if number == 1:
            first = time.perf_counter()  # the first step also traces and compiles
            first_cpu = time.process_time()
        with xp.StepTrace("train", step_num=number):
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model, *batch)
            loss.backward()
            optimizer.step()
    report(
        "torch_xla",
        model_name,
        args,
        params=counted,
        loss=float(loss.item()),
        first_step_seconds=first - start,
        steps_seconds=time.perf_counter() - first,
        steps_cpu_seconds=time.process_time() - first_cpu,  # every thread of the process
        peak_bytes=memory_peak(device),
    )
