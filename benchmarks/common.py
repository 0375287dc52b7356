"""Shared by the benchmarks: a work directory, a median timer, and `tpumem`
commands timed whole process to whole process, as a user runs them."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

WORK = Path(__file__).parent / "_work"


def run_json(command: list[str], env: dict[str, str]) -> dict[str, float]:
    """Runs a timing script in the work directory, `env` added to this process's,
    and returns the JSON object its last line of output prints; a failure ends the
    benchmark with the script's error output."""
    result = subprocess.run(
        command, capture_output=True, text=True, cwd=WORK, env={**os.environ, **env}, check=False
    )
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def compiled_like_an_install() -> None:
    """Writes tpumem's bytecode beside its sources, as pip does when it installs a
    package: a checkout whose environment sets PYTHONDONTWRITEBYTECODE (this
    workplace's does) would otherwise compile every module at every start-up
    (about 50 ms), which neither a user's install nor XProf's, the anchor, pays."""
    import compileall

    root = Path(__file__).resolve().parent.parent
    for package in ("tpumem", "adapters"):
        compileall.compile_dir(root / package, quiet=1)


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def tpumem_seconds(*args: str) -> float:
    """The wall time of `tpumem ARGS`, start-up included."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tpumem", *args], check=True, capture_output=True)
    return time.perf_counter() - start


def _tree_rss(root: int) -> int:
    """The resident bytes of `root` and every process under it."""
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        parents[pid] = int(fields[1])
        rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    tree, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(rss.get(pid, 0) for pid in tree)


def tpumem_seconds_and_memory(*args: str) -> tuple[float, int]:
    """(wall seconds, the process tree's peak RSS) of `tpumem ARGS`."""
    return seconds_and_memory([sys.executable, "-m", "tpumem", *args])


def seconds_and_memory(command: list[str]) -> tuple[float, int]:
    """(wall seconds, peak RSS) of a command: the process tree's, sampled from
    /proc, or the process's own high-water mark where that is higher."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors)
        peak, done = 0, threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.wait(0.02):
                peak = max(peak, _tree_rss(child.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - start
        done.set()
        sampler.join()
        if child.returncode != 0:
            errors.seek(0)
            said = errors.read().decode(errors="replace")[-2000:]
            raise SystemExit(f"{' '.join(command)} failed: {said}")
    return seconds, max(peak, usage.ru_maxrss * 1024)


def in_turns(anchor: Callable[[], float], measured: Callable[[], float], repeats: int) -> dict:
    """The anchor and the measured command, alternating `repeats` times each:
    their medians, measured / anchor, and every run (what the fit benchmarks print)."""
    anchors, runs = [], []
    for _ in range(repeats):
        anchors.append(anchor())
        runs.append(measured())
    return {
        "anchor_aot_s": statistics.median(anchors),
        "fit_s": statistics.median(runs),
        "ratio": statistics.median(runs) / statistics.median(anchors),
        "anchor_runs": anchors,
        "fit_runs": runs,
    }
