"""The plain PyTorch examples' training loop, matching the other frameworks':
Adam, the loop as PyTorch's tutorials write it (zero_grad, forward, backward,
step), on the GPU where there is one, else the CPU.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch
from model_config import BETAS, EPSILON, LEARNING_RATE, report
from torch import nn


def train(
    model_name: str,
    args: argparse.Namespace,
    model: nn.Module,
    loss_fn: Callable[..., torch.Tensor],
    *batch: torch.Tensor,
) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = model.to(device)
    batch = tuple(t.to(device) for t in batch)
    counted = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, betas=BETAS, eps=EPSILON)
    start = first = time.perf_counter()
    first_cpu = time.process_time()
    for number in range(args.steps):
        if number == 1:
            first = time.perf_counter()  # (the first step also makes Adam's state)
            first_cpu = time.process_time()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model, *batch)
        loss.backward()
        optimizer.step()
    report(
        "torch",
        model_name,
        args,
        params=counted,
        loss=float(loss.item()),
        first_step_seconds=first - start,
        steps_seconds=time.perf_counter() - first,
        steps_cpu_seconds=time.process_time() - first_cpu,
        # PyTorch's own peak on a GPU; the CPU keeps none.
        peak_bytes=torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None,
    )
