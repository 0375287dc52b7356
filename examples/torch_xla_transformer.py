"""The reference transformer (see model_config.py) in PyTorch/XLA, trained for a
few steps on random tokens.

PJRT_DEVICE=CPU python examples/torch_xla_transformer.py --width 128 --layers 2
tpumem profile examples/torch_xla_transformer.py --steps 50
"""

from __future__ import annotations

import torch
from model_config import parameter_count, parse_args
from torch import nn
from torch.nn import functional
from torch_xla_common import initialize, train


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


def main() -> None:
    args = parse_args("transformer", __doc__)
    model = Transformer(args.width, args.layers, args.heads, args.seq, args.vocab)
    initialize(model, args.seed)
    counted = sum(p.numel() for p in model.parameters())
    assert counted == parameter_count("transformer", args), counted
    print(f"PyTorch/XLA transformer: {counted:,} parameters")
    generator = torch.Generator().manual_seed(args.seed + 1)
    tokens = torch.randint(0, args.vocab, [args.batch, args.seq + 1], generator=generator)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def loss_fn(model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = model(inputs)
        return functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    train("transformer", args, model, loss_fn, inputs, targets)


if __name__ == "__main__":
    main()
