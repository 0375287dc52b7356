"""The reference transformer (see model_config.py) in PyTorch/XLA, trained for a
few steps on random tokens.

PJRT_DEVICE=CPU python examples/torch_xla_transformer.py --width 128 --layers 2
tpumem profile examples/torch_xla_transformer.py --steps 50
"""

from __future__ import annotations

from model_config import parse_args
from torch_models import transformer_task
from torch_xla_common import train


def main() -> None:
    args = parse_args("transformer", __doc__)
    model, batch, loss_fn = transformer_task(args, "PyTorch/XLA")
    train("transformer", args, model, loss_fn, *batch)


if __name__ == "__main__":
    main()
