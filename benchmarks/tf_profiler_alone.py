"""Runs an example under TensorFlow's own profiler and nothing of tpumem: the floor
of what recording TensorFlow's memory events costs (profile_overhead.py
--anchor tf-profiler times this process).

    python benchmarks/tf_profiler_alone.py EXAMPLE [EXAMPLE ARGS]

As `tpumem profile` runs TensorFlow on the CPU: the BFC allocator
(TF_CPU_ALLOCATOR_USE_BFC=true, so that it records memory events), and the
profiler on from the start to the end, in one session (its cheapest use; tpumem
stops and starts a session every --chunk seconds, so that a killed run keeps
what came before).
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import tempfile
from pathlib import Path

os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"

import tensorflow as tf  # (after the variable above: TensorFlow reads it as it loads)


def main() -> None:
    example, *args = sys.argv[1:]
    sys.argv = [example, *args]
    sys.path.insert(0, str(Path(example).parent))  # as `python example.py` has it
    logdir = tempfile.mkdtemp(prefix="tf-profiler-")
    tf.profiler.experimental.start(logdir)
    try:
        runpy.run_path(example, run_name="__main__")
    finally:
        tf.profiler.experimental.stop()
        shutil.rmtree(logdir, ignore_errors=True)


if __name__ == "__main__":
    main()
