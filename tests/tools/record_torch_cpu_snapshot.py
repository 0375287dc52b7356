"""Records tests/data/torch_cpu/mlp_adam.pickle: torch.profiler's memory events of
three Adam steps of a small MLP on the CPU, turned into a snapshot by PyTorch's
own conversion (torch.cuda._memory_viz._profile_to_snapshot), as a user would
make one without a GPU.

    .venv/bin/python tests/tools/record_torch_cpu_snapshot.py tests/data/torch_cpu/mlp_adam.pickle
"""

from __future__ import annotations

import pickle
import sys

import torch
from torch.cuda._memory_viz import _profile_to_snapshot
from torch.profiler import ProfilerActivity, profile


def main(out: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)
    )
    optimizer = torch.optim.Adam(model.parameters())
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, with_stack=True, record_shapes=True
    ) as prof:
        for _ in range(3):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    with open(out, "wb") as file:
        pickle.dump(_profile_to_snapshot(prof), file)


if __name__ == "__main__":
    main(sys.argv[1])
