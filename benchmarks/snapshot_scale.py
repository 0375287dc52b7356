"""`tpumem import` of a PyTorch memory snapshot of about 1 GB, then `tpumem report`
and its HTML page: time and peak memory, whole process to whole process.

    .venv/bin/python benchmarks/snapshot_scale.py [--entries 7000000]

The snapshot is made here in the layout torch/csrc/cuda/Module.cpp gives Python's
pickle (checked against the recorded snapshots in tests/data/torch_cuda): keys and
actions shared strings, each frame a dict shared by every stack that holds it, a
list of frames made for every allocation and shared with its frees, a
`compile_context` string made for every entry; stacks 12 to 40 frames deep, from
3,000 places (a few hundred of them most of the time).
Anchor, measured in the same run: `python -c "pickle.load(...)"` of the same file,
as memory_viz's Python helpers read it. Budget (issue 52): the import within 2x
the anchor's time, in less memory than the file's size.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import subprocess
import sys
import time
from pathlib import Path

from common import WORK


def write_snapshot(path: Path, entries: int, seed: int = 0) -> None:
    """A snapshot of `entries` trace entries (allocations, their frees requested and
    completed, a few segments) in PyTorch's layout."""
    rng = random.Random(seed)
    files = [f"/home/user/project/model_{i}.py" for i in range(40)] + [
        f"/usr/lib/python3.12/site-packages/torch/nn/modules/m{i}.py" for i in range(40)
    ]
    frames = [
        {"name": f"fn_{i}", "filename": rng.choice(files), "line": rng.randrange(1, 900)}
        for i in range(3000)
    ]
    places = [[rng.choice(frames) for _ in range(rng.randrange(12, 41))] for _ in range(3000)]
    trace: list[dict] = []
    live: list[tuple[int, int, list]] = []
    t, next_address = 1_790_000_000_000_000, 0x7F0000000000

    def entry(action: str, address: int, size: int, stack: list) -> dict:
        # (the same order of keys as PyTorch's; a compile_context string of its own)
        return {
            "action": action,
            "addr": address,
            "size": size,
            "stream": 0,
            "time_us": t,
            "compile_context": "".join(("N", "/A")),
            "user_metadata": "",
            "frames": stack,
        }

    while len(trace) < entries:
        t += rng.randrange(1, 40)
        if live and (len(live) > 4000 or rng.random() < 0.5):
            address, size, stack = live.pop(rng.randrange(len(live)))
            trace.append(entry("free_requested", address, size, stack))
            trace.append(entry("free_completed", address, size, stack))
            continue
        stack = list(places[min(int(rng.expovariate(1 / 300)), 2999)])  # (a list each)
        size = rng.choice((512, 4096, 65536, 1 << 20, 4 << 20, 3 * 7 * 1024 * 1024))
        address, next_address = next_address, next_address + size + 512
        live.append((address, size, stack))
        trace.append(entry("alloc", address, size, stack))
    snapshot = {
        "segments": [],
        "device_traces": [trace],
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False},
        "external_annotations": [],
    }
    with open(path, "wb") as file:
        pickle.dump(snapshot, file)


def _measured(command: list[str]) -> tuple[float, int]:
    """Wall seconds and peak resident bytes of a whole process."""
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(command)} failed: {process.stderr.read().decode()[-2000:]}")
    return seconds, usage.ru_maxrss * 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=7_000_000)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    WORK.mkdir(exist_ok=True)
    path = WORK / f"snapshot_{args.entries}.pickle"
    if not path.exists():
        print(f"writing {path.name} ...", flush=True)
        subprocess.run(
            [sys.executable, __file__, "--write", str(path), str(args.entries)], check=True
        )
    size = path.stat().st_size
    subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # (page cache)
    trace, page = WORK / "snapshot.tpumem", WORK / "snapshot.html"
    python = sys.executable
    load = [python, "-c", f"import pickle; pickle.load(open({str(path)!r}, 'rb'))"]
    imported = [python, "-m", "tpumem", "import", str(path), "-o", str(trace), "--force"]
    results: dict[str, list[tuple[float, int]]] = {"load": [], "import": []}
    for _ in range(args.repeats):
        results["load"].append(_measured(load))
        results["import"].append(_measured(imported))
    report = _measured([python, "-m", "tpumem", "report", str(trace)])
    html = _measured([python, "-m", "tpumem", "report", str(trace), "-o", str(page)])
    anchor = min(s for s, _ in results["load"])
    took = min(s for s, _ in results["import"])
    memory = max(m for _, m in results["import"])
    print(f"snapshot: {args.entries:,} entries, {size / 2**30:.2f} GiB")
    print(
        f"pickle.load (anchor): {anchor:.1f} s, "
        f"{max(m for _, m in results['load']) / 2**30:.2f} GiB peak"
    )
    print(f"tpumem import: {took:.1f} s ({took / anchor:.2f}x the anchor; budget 2x), ")
    print(f"  peak memory {memory / 2**30:.2f} GiB ({memory / size:.2f}x the file; budget < 1x)")
    print(f"tpumem report: {report[0]:.1f} s, {report[1] / 2**30:.2f} GiB peak")
    print(f"tpumem report -o page.html: {html[0]:.1f} s, {html[1] / 2**30:.2f} GiB peak")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--write":
        write_snapshot(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
