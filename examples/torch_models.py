"""The reference models (see model_config.py) in PyTorch, shared by the plain
PyTorch and the PyTorch/XLA examples: the transformer, the MLP and the reference
initialization. Imports torch alone: a script that uses it picks its device.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from model_config import INIT_STDDEV, parameter_count
from torch import nn
from torch.nn import functional


def mlp(width: int, layers: int, classes: int) -> nn.Module:
    hidden: list[nn.Module] = []
    for _ in range(layers):
        hidden += [nn.Linear(width, width), nn.GELU(approximate="tanh")]
    return nn.Sequential(*hidden, nn.Linear(width, classes))


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.out = (nn.Linear(width, width) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, width = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.reshape(batch, seq, self.heads, width // self.heads).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(2, 3) / float((width // self.heads) ** 0.5)
        causal = torch.tril(torch.ones(seq, seq, device=x.device))
        scores = torch.where(causal > 0, scores, -1e9)
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2)
        return self.out(out.reshape(batch, seq, width))


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = Attention(width, heads)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        h = functional.gelu(self.up(self.norm2(x)), approximate="tanh")
        return x + self.down(h)


class Transformer(nn.Module):
    def __init__(self, width: int, layers: int, heads: int, seq: int, vocab: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.positions = nn.Parameter(torch.empty(seq, width))
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        x = self.embed(inputs) + self.positions
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def initialize(model: nn.Module, seed: int) -> None:
    """The reference initialization: weights (dense, embeddings, positions) from
    N(0, 0.02), biases 0, norm scales 1. Drawn on the host, from one seed."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()
            elif isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.normal_(0.0, INIT_STDDEV, generator=generator)
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
        for param in model.parameters(recurse=False):
            param.normal_(0.0, INIT_STDDEV, generator=generator)  # e.g. positions


# A model, its fixed batch and its loss: what each training loop is given.
Task = tuple[nn.Module, tuple[torch.Tensor, ...], Callable[..., torch.Tensor]]


def _counted(model: nn.Module, name: str, args: argparse.Namespace, title: str) -> None:
    initialize(model, args.seed)
    counted = sum(p.numel() for p in model.parameters())
    assert counted == parameter_count(name, args), counted
    shown = "MLP" if name == "mlp" else name
    print(f"{title} {shown}: {counted:,} parameters")


def mlp_task(args: argparse.Namespace, title: str) -> Task:
    model = mlp(args.width, args.layers, args.classes)
    _counted(model, "mlp", args, title)
    generator = torch.Generator().manual_seed(args.seed + 1)
    x = torch.randn(args.batch, args.width, generator=generator)
    y = torch.randint(0, args.classes, [args.batch], generator=generator)

    def loss_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return functional.cross_entropy(model(x), y)

    return model, (x, y), loss_fn


def transformer_task(args: argparse.Namespace, title: str) -> Task:
    model = Transformer(args.width, args.layers, args.heads, args.seq, args.vocab)
    _counted(model, "transformer", args, title)
    generator = torch.Generator().manual_seed(args.seed + 1)
    tokens = torch.randint(0, args.vocab, [args.batch, args.seq + 1], generator=generator)

    def loss_fn(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = model(inputs)
        return functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    return model, (tokens[:, :-1], tokens[:, 1:]), loss_fn
