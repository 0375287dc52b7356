"""Overhead of `tpumem profile` on an example against the plain run, in one run.

    .venv/bin/python benchmarks/profile_overhead.py [--example tf_transformer.py]
        [--steps 100] [--repeats 5]
        [--anchor plain|no-programs|no-stacks|tf-profiler|tf-profiler-sessions|torch-profiler]
        [--through profile|track] [--live | --watch]
        [-- EXAMPLE ARGS]

Runs the anchor (the plain script; or, for what recording the compiled programs
or the call stacks costs, `tpumem profile --no-programs` / `--no-stacks`, and
then the trace's size too; or TensorFlow's own profiler alone, the floor for
TensorFlow: tf_profiler_alone.py, in one session or in sessions of a second as
tpumem runs them; or PyTorch's profiler alone with memory events, the floor for
plain PyTorch: torch_profiler_alone.py) and the profiled one in turn, `repeats`
times each, and prints the medians, their spreads and the ratios profiled / anchor of
- the training loop's own time (the example's `steps_seconds`: every step after the
  first, which traces and compiles) - the figure the goal is about (<= 1.05);
- the loop's CPU time, every thread of the script's process (the example's
  `steps_cpu_seconds`): what the capture costs in work, a figure this machine's
  noise moves less than the loop's wall time;
- the whole command's wall time, start-up, capture, last chunk and report included.
`--through track` records through the Python API instead: the example run inside
`tpumem.track` with JAX in use before the block, as in a notebook
(track_example.py; JAX examples only). `--live`: what the live line costs: the
profiled run on a pseudo-terminal (the live line on, its stdout and stderr passed
through the launcher), against the anchor `tpumem profile -q` (no line, no terminal).
`--watch`: what `tpumem watch` costs the run it follows: `tpumem profile -q` with
a `tpumem watch` of its trace running beside it, against the same without.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import WORK, compiled_like_an_install

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PJRT_DEVICE = os.environ.get("PJRT_DEVICE", "CPU")


def _on_a_terminal(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    """(exit status, what the terminal showed) of `command` on a pseudo-terminal."""
    leader, follower = pty.openpty()
    child = subprocess.Popen(
        command, stdin=follower, stdout=follower, stderr=follower, cwd=WORK, env=env
    )
    os.close(follower)
    shown = b""
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # the terminal's last holder closed it
            break
        if not data:
            break
        shown += data
    os.close(leader)
    return child.wait(), shown.decode(errors="replace")


def run(
    command: list[str], terminal: bool = False, watched: Path | None = None
) -> tuple[float, float, float]:
    """(the loop's seconds and its CPU seconds as the example reports them, the
    command's wall time); `watched`: a trace `tpumem watch` follows meanwhile."""
    start = time.perf_counter()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PJRT_DEVICE": PJRT_DEVICE}
    if watched is not None:
        watched.unlink(missing_ok=True)
        watch = subprocess.Popen(
            [sys.executable, "-m", "tpumem", "watch", str(watched)],
            stdout=subprocess.DEVNULL,
            cwd=WORK,
        )
        try:
            return run(command)
        finally:
            watch.wait(timeout=120)
    if terminal:
        status, shown = _on_a_terminal(command, env)
        wall = time.perf_counter() - start
        if status != 0:
            sys.exit(f"{' '.join(command)} failed:\n{shown[-2000:]}")
        # The example's last JSON line, among the live line's redraws and the report.
        lines = [part.strip() for part in re.split(r"[\r\n]|\x1b\[K", shown)]
        printed = json.loads(next(p for p in reversed(lines) if '"steps_seconds"' in p))
        return printed["steps_seconds"], printed["steps_cpu_seconds"], wall
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=WORK,
        # PyTorch/XLA: the device tpumem would pick, for the plain run too.
        env=env,
        check=False,
    )
    wall = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    printed = json.loads(result.stdout.strip().splitlines()[-1])
    return printed["steps_seconds"], printed["steps_cpu_seconds"], wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--example", default="tf_transformer.py")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--anchor",
        choices=(
            "plain",
            "no-programs",
            "no-stacks",
            "tf-profiler",
            "tf-profiler-sessions",
            "torch-profiler",
        ),
        default="plain",
    )
    parser.add_argument("--through", choices=("profile", "track"), default="profile")
    parser.add_argument("--live", action="store_true", help="the live line's cost")
    parser.add_argument("--watch", action="store_true", help="what tpumem watch costs the run")
    parser.add_argument("rest", nargs="*", help="more arguments for the example")
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    compiled_like_an_install()
    script = [str(EXAMPLES / args.example), "--steps", str(args.steps), *args.rest]
    profile = [sys.executable, "-m", "tpumem", "profile", "-q", "--force"]
    profiled_command = [*profile, "-o", str(WORK / "overhead.tpumem"), *script]
    if args.through == "track":
        api = Path(__file__).resolve().parent / "track_example.py"
        profiled_command = [sys.executable, str(api), str(WORK / "track.tpumem"), *script]
    plain_command = [sys.executable, *script]
    if args.live:
        plain_command = profiled_command
        profiled_command = [
            *[p for p in profile if p != "-q"],
            "-o",
            str(WORK / "live.tpumem"),
            *script,
        ]
        args.anchor = "profile -q"
    watched = None
    if args.watch:
        plain_command = profiled_command
        watched = WORK / "watched.tpumem"
        profiled_command = [*profile, "-o", str(watched), *script]
        args.anchor = "profile -q"
    if args.anchor.startswith("tf-profiler"):
        alone = Path(__file__).resolve().parent / "tf_profiler_alone.py"
        sessions = ["--sessions-of", "1"] if args.anchor == "tf-profiler-sessions" else []
        plain_command = [sys.executable, str(alone), *sessions, *script]
    if args.anchor == "torch-profiler":
        alone = Path(__file__).resolve().parent / "torch_profiler_alone.py"
        plain_command = [sys.executable, str(alone), *script]
    anchor_trace = WORK / "anchor.tpumem"
    if args.anchor in ("no-programs", "no-stacks"):
        plain_command = [*profile, f"--{args.anchor}", "-o", str(anchor_trace), *script]
    plain, profiled = [], []
    for repeat in range(args.repeats):
        # In turns, the order switched every pair (ABBA): whatever one run leaves
        # the next (dirty pages written back, caches) falls on both sides alike.
        if repeat % 2:
            profiled.append(run(profiled_command, args.live, watched))
            plain.append(run(plain_command))
        else:
            plain.append(run(plain_command))
            profiled.append(run(profiled_command, args.live, watched))
        print(
            f"run {repeat + 1}/{args.repeats}: loop {plain[-1][0]:.2f} s {args.anchor}, "
            f"{profiled[-1][0]:.2f} s profiled",
            flush=True,
        )
    for index, what in enumerate(("training loop", "loop CPU", "whole command")):
        a = statistics.median(p[index] for p in plain)
        b = statistics.median(p[index] for p in profiled)
        pairs = sorted(q[index] / p[index] for p, q in zip(plain, profiled, strict=True))
        print(
            f"{what:14}: {args.anchor} {a:.2f} s, profiled {b:.2f} s, ratio {b / a:.3f} "
            f"(pairs {pairs[0]:.3f}-{pairs[-1]:.3f}, their median {statistics.median(pairs):.3f})"
        )
    if args.anchor in ("no-programs", "no-stacks") and args.through == "profile":
        a, b = anchor_trace.stat().st_size, (WORK / "overhead.tpumem").stat().st_size
        print(f"trace size    : {args.anchor} {a:,} B, profiled {b:,} B, ratio {b / a:.3f}")
    print(f"(example {args.example}, {args.steps} steps, median of {args.repeats} runs each)")


if __name__ == "__main__":
    main()
