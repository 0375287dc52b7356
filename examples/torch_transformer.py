"""The reference transformer (see model_config.py) in plain PyTorch, trained for a few
steps on random data, on the GPU where there is one, else the CPU.

python examples/torch_transformer.py
tpumem profile examples/torch_transformer.py
"""

from __future__ import annotations

from model_config import parse_args
from torch_common import train
from torch_models import transformer_task


def main() -> None:
    args = parse_args("transformer", __doc__)
    model, batch, loss_fn = transformer_task(args, "PyTorch")
    train("transformer", args, model, loss_fn, *batch)


if __name__ == "__main__":
    main()
