"""Synthetic training-loop traces of any size, self-consistent: one step is run
through the BFC model and, since every step ends with the allocator in the same
state, tiled. Parameters live throughout; each step allocates activations and
frees them in a shuffled order, so fragmentation moves within a step."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from tpumem.analysis.allocators.bfc_model import replay
from tpumem.trace.schema import ALLOCATOR, BUFFER, CAPTURE_GAP, CAPTURE_RESUMED
from tpumem.trace.stack_rows import stack_text
from tpumem.trace.writer import TraceWriter

PARAMETERS = 20
ACTIVATIONS = 50  # per step: 100 events
OPS = [f"layer{i}/matmul" for i in range(10)]
SHAPES = [f"[{64 * (i + 1)},1024]" for i in range(10)]
LIMIT = 16 << 30


def _dictionary(codes: np.ndarray, words: list[str]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int32)), pa.array(words))


def _one_step(rng: np.random.Generator) -> dict[str, np.ndarray]:
    sizes = rng.integers(1 << 10, 4 << 20, ACTIVATIONS)
    frees = rng.permutation(ACTIVATIONS)
    return {
        "is_alloc": np.concatenate([np.ones(ACTIVATIONS, bool), np.zeros(ACTIVATIONS, bool)]),
        "local_id": np.concatenate([np.arange(ACTIVATIONS), frees]),
        "requested": np.concatenate([sizes, sizes[frees]]),
    }


def _replay(is_alloc, ids, requested) -> dict[str, np.ndarray]:
    result = replay(is_alloc, requested, ids, LIMIT)
    return {
        "address": result.address,
        "bytes": result.chunk_bytes,
        "in_use": result.in_use,
        "pool": result.pool,
        "largest": result.largest_free,
    }


def write_synthetic(
    path: Path,
    events: int,
    fidelity: str,
    marks: bool = True,
    stacks: bool = False,
    seed: int = 0,
    process: tuple[int, int] | None = None,
    gap_every: int = 0,
) -> None:
    """`stacks`: each buffer made by one of ten call stacks, one per op (row
    `stack` rows first); `seed`: another seed draws other activation sizes;
    `process`: (rank, count) of a distributed run it is one process of;
    `gap_every`: every so many steps, the step's frees fall in a capture gap
    (profiler sessions switching), so its buffers are freed unseen."""
    rng = np.random.default_rng(seed)
    step = _one_step(rng)
    params = rng.integers(1 << 20, 8 << 20, PARAMETERS)
    # The head: parameters, then a first step during which the pool grows; two
    # more steps show the steady state that is tiled after it.
    head_alloc = np.concatenate([np.ones(PARAMETERS, bool), step["is_alloc"]])
    head_ids = np.concatenate([np.arange(PARAMETERS), step["local_id"] + PARAMETERS])
    head_sizes = np.concatenate([params, step["requested"]])
    runs = 3
    replayed = _replay(
        np.concatenate([head_alloc, *[step["is_alloc"]] * (runs - 1)]),
        np.concatenate([head_ids, *[step["local_id"] + PARAMETERS] * (runs - 1)]),
        np.concatenate([head_sizes, *[step["requested"]] * (runs - 1)]),
    )
    n_head, per = len(head_ids), 2 * ACTIVATIONS
    head = {k: v[:n_head] for k, v in replayed.items()}
    steady = [
        {k: v[n_head + r * per : n_head + (r + 1) * per] for k, v in replayed.items()}
        for r in range(runs - 1)
    ]
    assert all((steady[0][k] == steady[1][k]).all() for k in ("address", "in_use", "largest"))
    per_step = 2 * ACTIVATIONS
    steps = max(1, (events - len(head_ids)) // per_step)
    metadata = {
        "framework": "synthetic",
        "backend": "gpu",
        "fidelity": {"GPU:0": ALLOCATOR if fidelity == "allocator" else BUFFER},
        "devices": [{"name": "GPU:0", "capacity_bytes": LIMIT}],
    }
    if process is not None:
        metadata["process"] = {"index": process[0], "count": process[1], "source": "synthetic"}
        metadata.update(host="synthetic", pid=10_000 + process[0], run="synthetic-run")
    with TraceWriter(path, metadata, flush_interval_s=0) as writer:
        if stacks:
            for index, op in enumerate(OPS):
                frames = [("train.py", 90, "<module>"), ("model.py", 10 + index, op.split("/")[0])]
                writer.record("stack", time_ns=0, stack=index, text=stack_text(frames))
        writer.write_columns(
            _columns(head, head_alloc, head_ids, head_sizes, np.arange(len(head_ids)), fidelity),
            len(head_ids),
        )
        chunk_steps = max(1, 1_000_000 // per_step)
        for first in range(0, steps, chunk_steps):
            count = min(chunk_steps, steps - first)
            index = np.arange(count * per_step)
            step_of = first + index // per_step
            within = index % per_step
            tiled = {k: v[within] for k, v in steady[0].items()}
            ids = PARAMETERS + (step_of + 1) * ACTIVATIONS + step["local_id"][within]
            time_index = len(head_ids) + first * per_step + index
            columns = _columns(
                tiled,
                step["is_alloc"][within],
                ids,
                step["requested"][within],
                time_index,
                fidelity,
            )
            if stacks:  # the stack of the op that made each buffer
                made = step["is_alloc"][within]
                columns["stack"] = np.ma.MaskedArray((ids % ACTIVATIONS) % len(OPS), mask=~made)
            if gap_every:
                columns = _gaps(writer, columns, step_of, within, time_index, gap_every)
            writer.write_columns(columns, len(columns["buffer_id"]))
            if not marks:
                continue
            numbers = first + np.arange(count)
            writer.write_columns(
                {
                    "kind": _dictionary(np.zeros(count), ["mark"]),
                    "time_ns": (len(head_ids) + numbers * per_step) * 1000,
                    "step": numbers + 1,
                    "text": ["step"] * count,
                },
                count,
            )


def _gaps(writer, columns, step_of, within, time_index, every: int) -> dict:
    """Drops the frees of every `every`-th step and marks a capture gap over them."""
    lost = (step_of % every == every - 1) & (within >= ACTIVATIONS)
    first = time_index[lost & (within == ACTIVATIONS)] * 1000
    for start in first.tolist():
        writer.mark(CAPTURE_GAP, time_ns=start - 500)
        writer.mark(CAPTURE_RESUMED, time_ns=start + ACTIVATIONS * 1000 - 500)
    keep = pa.array(~lost)
    return {
        key: value.filter(keep) if isinstance(value, pa.Array) else value[~lost]
        for key, value in columns.items()
    }


def _columns(replayed, is_alloc, ids, requested, time_index, fidelity: str) -> dict:
    n = len(ids)
    local = ids % ACTIVATIONS
    columns = {
        "kind": _dictionary(np.where(is_alloc, 0, 1), ["alloc", "free"]),
        "time_ns": time_index * 1000,
        "device": _dictionary(np.zeros(n), ["GPU:0"]),
        "buffer_id": ids,
        "requested_bytes": requested,
        "op": _dictionary(local % len(OPS), OPS),
        "shape": _dictionary(local % len(SHAPES), SHAPES),
        "region": _dictionary(np.zeros(n), ["activation"]),
        "dtype": _dictionary(np.zeros(n), ["bfloat16"]),
    }
    if fidelity == "allocator":
        return columns | {
            "address": replayed["address"],
            "bytes": replayed["bytes"],
            "bytes_in_use": replayed["in_use"],
            "bytes_limit": np.full(n, LIMIT),
            "fragmentation": _fragmentation(replayed),
        }
    return columns | {"bytes": requested}


def _fragmentation(replayed: dict[str, np.ndarray]) -> np.ndarray:
    free = (replayed["pool"] - replayed["in_use"]).astype(np.float64)
    return np.where(free > 0, (free - replayed["largest"]) / np.maximum(free, 1), 0.0)
