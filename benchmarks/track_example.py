"""Runs an example inside `tpumem.track`, with JAX imported and in use before the
block, as in a notebook (the process profile_overhead.py --through track times).

    python benchmarks/track_example.py TRACE EXAMPLE [EXAMPLE ARGS]
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import jax.numpy as jnp

import tpumem


def main() -> None:
    trace, example, *args = sys.argv[1:]
    jnp.ones((8,)).block_until_ready()  # JAX started before the block
    sys.argv = [example, *args]
    sys.path.insert(0, str(Path(example).parent))  # as `python example.py` has it
    with tpumem.track(trace, force=True, framework="jax"):
        runpy.run_path(example, run_name="__main__")


if __name__ == "__main__":
    main()
