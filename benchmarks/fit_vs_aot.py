"""`tpumem fit` against its anchor, JAX's own ahead-of-time compile of the same
programs, whole process to whole process, in one run.

    .venv/bin/python benchmarks/fit_vs_aot.py [--repeats 3]

The script is examples/jax_llama_step.py: a Llama-shaped step of about 1B
parameters, FSDP over v5e-8 (v5e:2x4). The anchor runs fit_anchor.py: the
script's init and step lowered from shapes and compiled by XLA:TPU with JAX's AOT
API, nothing more. The measured command is `tpumem fit -q --tpu v5e-8
jax_llama_step.py`: the script as written, its devices the slice's, its two
programs compiled for it, the trace written and the report printed. XLA:TPU's
budget for v5e is measured once before (tpumem's cache then holds it, as it does
for a user after the first fit). The two alternate, `repeats` times each;
printed: the medians and fit / anchor.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import WORK, in_turns

HERE = Path(__file__).resolve().parent


def _libtpu_env() -> dict[str, str]:
    sys.path.insert(0, str(HERE.parent))
    from tpumem.tpu.compile import libtpu_path

    found = libtpu_path()
    if found is None:
        sys.exit("libtpu is not installed: tpumem install-libtpu")
    path = os.pathsep.join(p for p in (found, os.environ.get("PYTHONPATH", "")) if p)
    return {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": path,
        "TPU_SKIP_MDS_QUERY": "1",
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
    }


def _seconds(
    command: list[str], env: dict[str, str] | None = None, ok: tuple[int, ...] = (0,)
) -> float:
    """The command's whole-process seconds; any exit status but `ok` ends the run."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=WORK, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in ok:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return seconds


def fit_against_anchor(
    fit_args: list[str],
    anchor: str,
    repeats: int,
    warm: bool = True,
    ok: tuple[int, ...] = (0,),
) -> None:
    """The fit benchmarks' driver: `tpumem fit -q --force FIT_ARGS` against the
    anchor script (bare compiles with libtpu on the path), alternating, `--repeats`
    times each (default `repeats`); printed: the medians and fit / anchor. `warm`:
    one fit first, so that XLA:TPU's budget is in tpumem's cache, as after a
    first fit; `ok`: the exit statuses fit may end with (1: does not fit)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=repeats)
    options = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    fit = [sys.executable, "-m", "tpumem", "fit", "-q", "--force", *fit_args]
    bare = [sys.executable, str(HERE / anchor)]
    env = _libtpu_env()
    if warm:
        _seconds(fit, ok=ok)
    result = in_turns(lambda: _seconds(bare, env), lambda: _seconds(fit, ok=ok), options.repeats)
    print(json.dumps(result, indent=1))


def main() -> None:
    script = str(HERE.parent / "examples" / "jax_llama_step.py")
    fit_against_anchor(
        ["--tpu", "v5e-8", "-o", "jax_llama_step.fit.tpumem", script], "fit_anchor.py", 3
    )


if __name__ == "__main__":
    main()
