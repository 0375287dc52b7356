"""The reference MLP (see model_config.py) in PyTorch/XLA, trained for a few steps.

PJRT_DEVICE=CPU python examples/torch_xla_mlp.py --width 512 --layers 4 --batch 64
tpumem profile examples/torch_xla_mlp.py
"""

from __future__ import annotations

from model_config import parse_args
from torch_models import mlp_task
from torch_xla_common import train


def main() -> None:
    args = parse_args("mlp", __doc__)
    model, batch, loss_fn = mlp_task(args, "PyTorch/XLA")
    train("mlp", args, model, loss_fn, *batch)


if __name__ == "__main__":
    main()
