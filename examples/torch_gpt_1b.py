"""A GPT-style language model of 1.1 billion parameters in plain PyTorch (20
pre-norm blocks of width 2048, a 32,000-token vocabulary), trained with AdamW
on random tokens, on the GPU where there is one. Too large to train on a CPU;
`tpumem fit` tells whether it fits a GPU without one:

tpumem fit --gpu H100-80GB examples/torch_gpt_1b.py
tpumem fit --gpu H100-80GB --sweep batch=4,8,12,16 examples/torch_gpt_1b.py
"""

from __future__ import annotations

import argparse

import torch
from torch import nn


class Gpt(nn.Module):
    def __init__(self, vocab: int, width: int, layers: int, heads: int, seq: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(
                width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
            )
            for _ in range(layers)
        )
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        h = self.tokens(tokens) + self.positions(torch.arange(seq, device=tokens.device))
        for block in self.blocks:
            h = block(h, src_mask=self.mask[:seq, :seq], is_causal=True)
        return self.head(self.norm(h))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = Gpt(args.vocab, args.width, args.layers, args.heads, args.seq).to(device)
    print(f"{sum(p.numel() for p in model.parameters()):,} parameters")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for step in range(args.steps):
        tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=device)
        logits = model(tokens[:, :-1])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 10 == 0:
            print(f"step {step}: loss {loss.item():.3f}")


if __name__ == "__main__":
    main()
