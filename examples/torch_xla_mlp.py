"""The reference MLP (see model_config.py) in PyTorch/XLA, trained for a few steps.

PJRT_DEVICE=CPU python examples/torch_xla_mlp.py --width 512 --layers 4 --batch 64
tpumem profile examples/torch_xla_mlp.py
"""

from __future__ import annotations

import torch
from model_config import parameter_count, parse_args
from torch import nn
from torch.nn import functional
from torch_xla_common import initialize, train


def main() -> None:
    args = parse_args("mlp", __doc__)
    layers: list[nn.Module] = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.width, args.width), nn.GELU(approximate="tanh")]
    model = nn.Sequential(*layers, nn.Linear(args.width, args.classes))
    initialize(model, args.seed)
    counted = sum(p.numel() for p in model.parameters())
    assert counted == parameter_count("mlp", args), counted
    print(f"PyTorch/XLA MLP: {counted:,} parameters")
    generator = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.batch, args.width, generator=generator)
    y = torch.randint(0, args.classes, [args.batch], generator=generator)

    def loss_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return functional.cross_entropy(model(x), y)

    train("mlp", args, model, loss_fn, x, y)


if __name__ == "__main__":
    main()
