"""Traces whose shape, not their size, could make them slow: many small record
batches (a long run's writer flushes ten a second) and many devices (a pod
slice). Each against the same events in the plain shape (few batches, one
device), whole `tpumem report` processes, in the same run.

    .venv/bin/python benchmarks/trace_shapes.py [--events 160000] [--devices 10000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from common import WORK

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tpumem.trace.compact import compact  # noqa: E402
from tpumem.trace.writer import TraceWriter  # noqa: E402


def write(path: Path, events: int, devices: int, per_batch: int) -> None:
    """`events` allocations and frees of 256 bytes, spread over `devices`, flushed
    every `per_batch` events."""
    with TraceWriter(path, {"framework": "jax"}, flush_interval_s=0) as writer:
        for i in range(events // 2):
            device = f"TPU:{i % devices}"
            writer.alloc(time_ns=2 * i, device=device, buffer_id=i, bytes=256, op="dot")
            writer.free(time_ns=2 * i + 1, device=device, buffer_id=i, bytes=256)
            if (2 * i + 2) % per_batch == 0:
                writer.flush()


def report_seconds(path: Path, fmt: str, repeats: int) -> tuple[float, int]:
    """Median wall time of `tpumem report`, and the largest RSS (KiB)."""
    times, rss = [], 0
    for _ in range(repeats):
        start = time.perf_counter()
        result = subprocess.run(
            ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "tpumem", "report", str(path),
             "-f", fmt],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        times.append(time.perf_counter() - start)
        rss = max(rss, int(result.stderr.strip().splitlines()[-1]))
    return sorted(times)[len(times) // 2], rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=160_000)
    parser.add_argument("--devices", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    cases = {
        "few batches": (options.events, 1, options.events),
        "a batch every 2 events": (options.events, 1, 2),
        "the same, compacted": (options.events, 1, 2),
        "one device": (2 * options.devices, 1, 2 * options.devices),
        f"{options.devices:,} devices": (2 * options.devices, options.devices, 2 * options.devices),
    }
    figures = {}
    for name, (events, devices, per_batch) in cases.items():
        path = WORK / f"shape_{events}_{devices}_{per_batch}.tpumem"
        if not path.exists():
            write(path, events, devices, per_batch)
        if name == "the same, compacted":  # as `tpumem profile` leaves a long run's trace
            compacted = path.with_suffix(".compacted.tpumem")
            compacted.write_bytes(path.read_bytes())
            start = time.perf_counter()
            compact(compacted)
            print(f"compacting it: {time.perf_counter() - start:.2f} s", flush=True)
            path = compacted
        for fmt in ("json", "text"):
            figures[name, fmt] = report_seconds(path, fmt, options.repeats)
            seconds, rss = figures[name, fmt]
            print(
                f"{name:24s} {events:>9,} events, report -f {fmt:4s}: {seconds:6.2f} s, "
                f"RSS {rss / 2**20:.2f} GiB",
                flush=True,
            )
    for shape, plain in (
        ("a batch every 2 events", "few batches"),
        (f"{options.devices:,} devices", "one device"),
    ):
        for fmt in ("json", "text"):
            ratio = figures[shape, fmt][0] / figures[plain, fmt][0]
            print(f"ratio {shape} / {plain}, {fmt}: {ratio:.2f}")


if __name__ == "__main__":
    main()
