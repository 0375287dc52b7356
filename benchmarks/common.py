"""Shared by the benchmarks: a work directory and a median timer."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

WORK = Path(__file__).parent / "_work"


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
