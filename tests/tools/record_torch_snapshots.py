"""Records PyTorch's own CUDA memory snapshots, and what PyTorch's counters said,
for the PyTorch importer and adapter (issue 52). Run on a machine with an NVIDIA
GPU and torch with CUDA, from the repository's root:

    python3 tests/tools/record_torch_snapshots.py OUT_DIR

Each part runs in a fresh process (its peak counters start at zero) and writes
PART.pickle (torch.cuda.memory._snapshot(), as _dump_snapshot writes it) and
PART.json (memory_stats() and the peaks at the end, the settings, the versions):

  mlp         the reference MLP (examples/model_config.py), Adam, 20 steps,
              history with Python stacks from before the first allocation
  overflow    the same with max_entries=300: the ring buffer wrapped
  expandable  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, two batch
              sizes and an empty_cache() between them (segments mapped and unmapped)
  state       history "state" only: blocks with stacks, no device_traces
  bare        no history ever recorded: segments and blocks, no frames
  oom         a 512 MiB memory fraction and a request past it: the snapshot the
              out-of-memory observer took, and the message PyTorch raised
  timing      what recording costs a many-allocation training loop: plain,
              PyTorch's history with Python stacks, and the history read off the
              ring buffer by a polling thread (is it lossless? at what cost?)
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
PARTS = ("mlp", "overflow", "expandable", "state", "bare", "oom", "gpt2", "timing")


def _versions(torch) -> dict:
    props = torch.cuda.get_device_properties(0)
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": props.name,
        "device_total_bytes": props.total_memory,
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
    }


def _figures(torch) -> dict:
    return {
        "max_memory_allocated": torch.cuda.max_memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "memory_allocated": torch.cuda.memory_allocated(),
        "memory_reserved": torch.cuda.memory_reserved(),
        "memory_stats": dict(torch.cuda.memory_stats()),
    }


def _mlp(torch, width=512, layers=4, batch=64, classes=10):
    from model_config import BETAS, EPSILON, INIT_STDDEV, LEARNING_RATE
    from torch import nn

    modules: list = []
    for _ in range(layers):
        modules += [nn.Linear(width, width), nn.GELU(approximate="tanh")]
    model = nn.Sequential(*modules, nn.Linear(width, classes))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, INIT_STDDEV) if p.dim() == 2 else p.zero_()
    model = model.cuda()
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, betas=BETAS, eps=EPSILON)

    def batch_of(n):
        return torch.randn(n, width, device="cuda"), torch.randint(0, classes, [n], device="cuda")

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss

    return model, optimizer, batch_of, step


def _write(out: Path, name: str, torch, extra: dict) -> None:
    torch.cuda.synchronize()
    record = {"part": name, **_versions(torch), **_figures(torch), **extra}
    snapshot = torch.cuda.memory._snapshot()
    with open(out / f"{name}.pickle", "wb") as f:
        pickle.dump(snapshot, f)
    traces = snapshot.get("device_traces") or [[]]
    record["snapshot_keys"] = sorted(snapshot)
    record["trace_entries"] = len(traces[0])
    record["trace_actions"] = sorted({e.get("action") for e in traces[0]})
    record["trace_entry_keys"] = sorted({k for e in traces[0] for k in e})
    record["segments"] = len(snapshot.get("segments", []))
    (out / f"{name}.json").write_text(json.dumps(record, indent=1, default=str))
    print(
        f"{name}: {record['trace_entries']} entries, peak {record['max_memory_allocated']}, "
        f"reserved peak {record['max_memory_reserved']}, "
        f"{(out / f'{name}.pickle').stat().st_size} bytes"
    )


def part_mlp(out: Path, name: str = "mlp", max_entries: int = sys.maxsize) -> None:
    import torch

    torch.cuda.memory._record_memory_history(
        "all", context="all", stacks="python", max_entries=max_entries
    )
    _model, _opt, batch_of, step = _mlp(torch)
    x, y = batch_of(64)
    for _ in range(20):
        loss = step(x, y)
    _write(
        out,
        name,
        torch,
        {
            "loss": float(loss.item()),
            "max_entries": max_entries if max_entries < sys.maxsize else None,
        },
    )


def part_overflow(out: Path) -> None:
    part_mlp(out, "overflow", max_entries=300)


def part_expandable(out: Path) -> None:
    import torch

    assert "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    torch.cuda.memory._record_memory_history("all", context="all", stacks="python")
    _model, _opt, batch_of, step = _mlp(torch, width=1024)
    x, y = batch_of(4096)
    for _ in range(5):
        step(x, y)
    del x, y
    torch.cuda.synchronize()
    reserved_before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    reserved_after = torch.cuda.memory_reserved()
    x, y = batch_of(256)
    for _ in range(5):
        loss = step(x, y)
    _write(
        out,
        "expandable",
        torch,
        {
            "loss": float(loss.item()),
            "reserved_before_empty_cache": reserved_before,
            "reserved_after_empty_cache": reserved_after,
        },
    )


def part_state(out: Path) -> None:
    import torch

    torch.cuda.memory._record_memory_history("state", context="state", stacks="python")
    _model, _opt, batch_of, step = _mlp(torch)
    x, y = batch_of(64)
    for _ in range(3):
        step(x, y)
    _write(out, "state", torch, {})


def part_bare(out: Path) -> None:
    import torch

    _model, _opt, batch_of, step = _mlp(torch)
    x, y = batch_of(64)
    for _ in range(3):
        step(x, y)
    _write(out, "bare", torch, {})


def part_oom(out: Path) -> None:
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    fraction = (512 << 20) / total
    torch.cuda.set_per_process_memory_fraction(fraction)
    torch.cuda.memory._record_memory_history("all", context="all", stacks="python")
    seen: dict = {}

    def observer(device, alloc, device_alloc, device_free):
        # PyTorch calls this before it raises: the state at the failure.
        seen.update(device=device, alloc=alloc, device_alloc=device_alloc, device_free=device_free)
        with open(out / "oom.pickle", "wb") as f:
            pickle.dump(torch.cuda.memory._snapshot(), f)

    torch._C._cuda_attach_out_of_memory_observer(observer)
    _model, _opt, batch_of, step = _mlp(torch, width=1024)
    x, y = batch_of(64)
    for _ in range(3):
        step(x, y)
    keep = torch.empty(300 << 20, dtype=torch.uint8, device="cuda")  # 300 MiB held
    message = None
    try:
        torch.empty(400 << 20, dtype=torch.uint8, device="cuda")  # past 512 MiB
    except torch.OutOfMemoryError as error:
        message = str(error)
    del keep
    record = {
        "part": "oom",
        **_versions(torch),
        **_figures(torch),
        "fraction": fraction,
        "observer": seen,
        "message": message,
    }
    snapshot = (
        pickle.loads((out / "oom.pickle").read_bytes()) if (out / "oom.pickle").exists() else {}
    )
    traces = snapshot.get("device_traces") or [[]]
    record["trace_entries"] = len(traces[0])
    record["oom_entries"] = [e for e in traces[0] if e.get("action") == "oom"][:3]
    for e in record["oom_entries"]:
        e.pop("frames", None)
    (out / "oom.json").write_text(json.dumps(record, indent=1, default=str))
    print("oom:", seen, (message or "")[:300])


def part_gpt2(out: Path) -> None:
    """A Hugging Face causal LM from its config (random weights, nothing
    downloaded), AdamW, three steps: a real library's deep stacks."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.cuda.memory._record_memory_history("all", context="all", stacks="python")
    config = GPT2Config(n_layer=2, n_embd=256, n_head=4, n_positions=256, vocab_size=8192)
    model = GPT2LMHeadModel(config).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, config.vocab_size, (8, 256), device="cuda")
    for _ in range(3):
        optimizer.zero_grad(set_to_none=True)
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
    import transformers

    _write(
        out, "gpt2", torch, {"loss": float(loss.item()), "transformers": transformers.__version__}
    )


# -- timing ---------------------------------------------------------------------


class RingPoller:
    """Reads the history off PyTorch's ring buffer as the run goes: every
    `interval` seconds a snapshot, and the entries after the last one seen."""

    def __init__(self, torch, interval: float):
        self.torch, self.interval = torch, interval
        self.entries = 0
        self.allocs = 0
        self.polls = 0
        self.poll_seconds = 0.0
        self.lost = 0  # polls whose last-seen entry had left the buffer
        self.last = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def key(entry: dict) -> tuple:
        return (entry.get("time_us"), entry.get("action"), entry.get("addr"), entry.get("size"))

    def new_entries(self, trace: list) -> list:
        if self.last is None:
            return trace
        for index in range(len(trace) - 1, -1, -1):
            if self.key(trace[index]) == self.last:
                return trace[index + 1 :]
        self.lost += 1
        return trace

    def poll(self) -> None:
        began = time.perf_counter()
        trace = (self.torch.cuda.memory._snapshot().get("device_traces") or [[]])[0]
        fresh = self.new_entries(trace)
        if trace:
            self.last = self.key(trace[-1])
        self.entries += len(fresh)
        self.allocs += sum(1 for e in fresh if e.get("action") == "alloc")
        self.polls += 1
        self.poll_seconds += time.perf_counter() - began

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            self.poll()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.poll()


def part_timing(out: Path) -> None:
    import torch

    _model, _opt, batch_of, step = _mlp(torch, width=256, layers=16, batch=32)
    x, y = batch_of(32)
    for _ in range(20):
        step(x, y)
    torch.cuda.synchronize()
    steps = 400

    def run_steps() -> tuple[float, int]:
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        began = time.perf_counter()
        for _ in range(steps):
            step(x, y)
        torch.cuda.synchronize()
        return time.perf_counter() - began, torch.cuda.memory_stats()[
            "allocation.all.allocated"
        ] - before

    # (history context, ring entries or None, poll interval or None); None: plain.
    configs = {
        "plain": None,
        "history": ("all", None, None),
        "history_alloc_stacks": ("alloc", None, None),
        "polled": ("all", None, 0.1),
        "polled_ring_20000": ("all", 20000, 0.05),
        "polled_ring_5000": ("all", 5000, 0.01),
        "polled_alloc_ring_5000": ("alloc", 5000, 0.01),
    }
    results: dict = {"steps": steps, **{key: [] for key in configs}}
    names = list(configs)
    for round_ in range(5):
        for key in names[round_ % len(names) :] + names[: round_ % len(names)]:
            config = configs[key]
            if config is None:
                seconds, allocs = run_steps()
                results["allocs_per_step"] = allocs / steps
                results[key].append(seconds)
                continue
            context, ring, interval = config
            torch.cuda.memory._record_memory_history(
                "all",
                context=context,
                stacks="python",
                max_entries=ring or sys.maxsize,
                clear_history=True,
            )
            if interval is None:
                results[key].append(run_steps()[0])
                torch.cuda.memory._record_memory_history(None)
                continue
            with RingPoller(torch, interval) as poller:
                seconds, allocs = run_steps()
            torch.cuda.memory._record_memory_history(None)
            results[key].append(seconds)
            results[f"{key}_check"] = {
                "allocs_counted": allocs,
                "allocs_read": poller.allocs,
                "entries_read": poller.entries,
                "polls": poller.polls,
                "poll_seconds": poller.poll_seconds,
                "lost_polls": poller.lost,
            }
    # What one snapshot costs, by the ring buffer's length.
    costs = {}
    for entries in (1000, 10000, 100000):
        torch.cuda.memory._record_memory_history(
            "all", context="all", stacks="python", max_entries=entries, clear_history=True
        )
        while len(torch.cuda.memory._snapshot()["device_traces"][0]) < entries:
            for _ in range(50):
                step(x, y)
        began = time.perf_counter()
        for _ in range(3):
            torch.cuda.memory._snapshot()
        costs[entries] = (time.perf_counter() - began) / 3
        torch.cuda.memory._record_memory_history(None)
    results["snapshot_seconds_by_entries"] = costs
    results.update(_versions(torch))
    (out / "timing.json").write_text(json.dumps(results, indent=1))
    best = {k: sorted(results[k])[len(results[k]) // 2] for k in configs}
    print("timing (median over plain):", {k: round(v / best["plain"], 3) for k, v in best.items()})
    print({k: v for k, v in results.items() if k.endswith("_check")}, costs)


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--part":
        out = Path(sys.argv[3])
        globals()[f"part_{sys.argv[2]}"](out)
        return 0
    out = Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for part in PARTS:
        env = dict(os.environ)
        if part == "expandable":
            env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        began = time.time()
        try:
            done = subprocess.run(
                [sys.executable, __file__, "--part", part, str(out)], env=env, timeout=240
            )
            if done.returncode:
                failed.append(part)
        except subprocess.TimeoutExpired:
            traceback.print_exc()
            failed.append(part)
        print(f"[{part}: {time.time() - began:.1f} s]", flush=True)
    print("failed:", failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
