"""PyTorch's CUDA caching allocator, modeled (tpumem/analysis/allocators/caching_allocator.py),
held to what PyTorch itself did in the snapshots recorded on an H200
(tests/data/torch_cuda): the segments it took, its reserved peak, the free blocks
its segments held at the end, and the allocation it failed under a limit."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from tpumem.analysis import analyze
from tpumem.analysis.allocators.caching_allocator import (
    SOURCE,
    CachingAllocator,
    OutOfMemory,
    replay,
    segment_size,
)
from tpumem.analysis.allocators.capacity import SEGMENTS
from tpumem.outputs import create_trace
from tpumem.snapshots.importing import import_snapshot
from tpumem.trace.reader import load

DATA = Path(__file__).parent.parent / "data" / "torch_cuda"
MiB = 1 << 20


def _history(part: str, with_oom: bool = False) -> tuple[dict, tuple[np.ndarray, ...], int]:
    """The snapshot's allocations and completed frees as the model replays them
    (and its failed request, as one more allocation); the failed one's index."""
    snapshot = pickle.loads((DATA / f"{part}.pickle").read_bytes())
    is_alloc, asked, ids, live, failed = [], [], [], {}, -1
    for index, entry in enumerate(snapshot["device_traces"][0]):
        action = entry["action"]
        if action == "alloc" or (with_oom and action == "oom"):
            failed = len(is_alloc) if action == "oom" else failed
            live[entry.get("addr")] = index
            is_alloc.append(True)
            asked.append(entry["size"])
            ids.append(index)
        elif action == "free_completed" and entry["addr"] in live:
            is_alloc.append(False)
            asked.append(0)
            ids.append(live.pop(entry["addr"]))
    return snapshot, (np.array(is_alloc), np.array(asked), np.array(ids)), failed


@pytest.mark.parametrize("part", ["mlp", "oom", "gpt2"])
def test_the_model_takes_the_segments_pytorch_took(part):
    snapshot, history, _ = _history(part)
    counters = json.loads((DATA / f"{part}.json").read_text())
    result = replay(*history)
    taken = [e["size"] for e in snapshot["device_traces"][0] if e["action"] == "segment_alloc"]
    assert result.segments == tuple(taken)  # the same segments, in the same order
    assert result.reserved.max() == counters["max_memory_reserved"]
    assert result.allocated.max() == counters["max_memory_allocated"]


def test_the_models_free_blocks_at_the_end_are_pytorchs():
    """The MLP's snapshot ends with its segments' blocks: the model, replaying the
    run, holds the same free blocks, and the same allocated ones."""
    snapshot = pickle.loads((DATA / "mlp.pickle").read_bytes())
    model, live = CachingAllocator(), {}
    for entry in snapshot["device_traces"][0]:
        if entry["action"] == "alloc":
            live[entry["addr"]] = model.malloc(entry["size"])
        elif entry["action"] == "free_completed":
            model.free(live.pop(entry["addr"]))
    blocks = [b for s in snapshot["segments"] for b in s["blocks"]]
    free = sorted(b["size"] for b in blocks if b["state"] != "active_allocated")
    allocated = sorted(b["size"] for b in blocks if b["state"] == "active_allocated")
    assert sorted(size for pool in model.pools for size, _ in pool.free) == free
    assert sorted(block.size for block in live.values()) == allocated


def test_the_model_fails_where_pytorch_failed():
    """Under the 512 MiB PyTorch was allowed (set_per_process_memory_fraction),
    the model fails at the very request PyTorch refused (400 MiB), and holds
    the run where there is room for it."""
    _, history, failed = _history("oom", with_oom=True)
    counters = json.loads((DATA / "oom.json").read_text())
    assert "512.00 MiB allowed" in counters["message"]
    limited = replay(*history, capacity=512 * MiB)
    assert limited.failed_at == failed
    # Having given back its free segments first, as PyTorch did before it failed.
    assert limited.reserved[failed] == counters["memory_reserved"]
    assert replay(*history, capacity=1024 * MiB).failed_at == -1


def test_the_rules_of_segments_splits_and_merges():
    assert segment_size(512) == 2 * MiB
    assert segment_size(MiB) == 2 * MiB
    assert segment_size(MiB + 512) == 20 * MiB
    assert segment_size(10 * MiB) == 10 * MiB
    assert segment_size(10 * MiB + 1) == 12 * MiB
    model = CachingAllocator()
    small = model.malloc(1000)  # 1024 of a new 2 MiB segment, the rest kept free
    assert (small.size, model.reserved, model.allocated) == (1024, 2 * MiB, 1024)
    big = model.malloc(19 * MiB + 1)  # a 20 MiB segment: what is left (< 1 MiB) not split
    assert big.size == 20 * MiB and model.allocated == 1024 + 20 * MiB
    model.free(big)
    other = model.malloc(8 * MiB)  # from the freed 20 MiB block, split: 12 MiB kept
    assert model.reserved == 22 * MiB and other.size == 8 * MiB
    assert model.largest_free() == 12 * MiB
    model.free(other)  # merged back with its neighbour: one 20 MiB free block
    assert model.largest_free() == 20 * MiB


def test_a_failed_segment_first_gives_back_the_free_ones():
    model = CachingAllocator(capacity=40 * MiB)
    model.free(model.malloc(15 * MiB))  # a 16 MiB segment, cached, holding nothing
    held = model.malloc(30 * MiB)  # 16 + 30 > 40: the free segment is given back first
    assert held.size == 30 * MiB and model.reserved == 30 * MiB
    with pytest.raises(OutOfMemory) as failed:
        model.malloc(12 * MiB)  # 30 + 12 > 40, and nothing left to give back
    assert (failed.value.block, failed.value.reserved) == (12 * MiB, 30 * MiB)


def test_a_pytorch_trace_is_analysed_with_the_caching_allocators_model(tmp_path):
    target = tmp_path / "gpt2.tpumem"
    import_snapshot(DATA / "gpt2.pickle", lambda: (target, create_trace(target, (), False)))
    analysis = analyze(load(target), capacity=400 * MiB)
    (gpu,) = analysis.devices
    assert gpu.fragmentation.source == f"{SOURCE} replaying lifetimes"
    (check,) = analysis.capacity
    assert check.pool_growth == SEGMENTS
    assert check.failure is not None and check.failure.source == SOURCE
    counters = json.loads((DATA / "gpt2.json").read_text())
    # Under a cap the allocator gives back its free segments and tries again: the
    # run holds in less than it reserved unlimited, never in less than it used.
    assert counters["max_memory_allocated"] <= check.smallest_bytes
    assert check.smallest_bytes <= counters["max_memory_reserved"]
