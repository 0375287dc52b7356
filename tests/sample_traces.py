"""Hand-built trace rows whose figures are worked out in the tests that use them."""

KiB, MiB = 1024, 1024 * 1024


def buffer_rows():
    # in use: 100, 400, 300, 350, 50  -> peak 400 at t=20, A and B live.
    return [
        {"kind": "mark", "time_ns": 0, "text": "step", "step": 1},
        {
            "kind": "alloc",
            "time_ns": 10,
            "device": "CPU:0",
            "buffer_id": 1,
            "bytes": 100,
            "requested_bytes": 90,
            "op": "A",
            "region": "parameter",
            "dtype": "float32",
            "shape": "[25]",
        },
        {"kind": "mark", "time_ns": 15, "text": "step", "step": 2},
        {
            "kind": "alloc",
            "time_ns": 20,
            "device": "CPU:0",
            "buffer_id": 2,
            "bytes": 300,
            "requested_bytes": 280,
            "op": "B",
            "region": "activation",
            "dtype": "float32",
            "shape": "[75]",
        },
        {"kind": "free", "time_ns": 30, "device": "CPU:0", "buffer_id": 1, "bytes": 100},
        {
            "kind": "alloc",
            "time_ns": 40,
            "device": "CPU:0",
            "buffer_id": 3,
            "bytes": 50,
            "requested_bytes": 50,
            "op": "C",
            "region": "temp",
        },
        {"kind": "free", "time_ns": 50, "device": "CPU:0", "buffer_id": 2, "bytes": 300},
    ]


def chunk_map_rows():
    """Four 256 KiB chunks at the start of a 2 MiB region; then b and d are freed.
    Free chunks: [256K, 512K) and [768K, 2M) (d coalesces with the tail):
    free = 2M - 512K = 1.5 MiB, largest = 1.25 MiB, fragmentation = 0.25/1.5 = 1/6."""
    base = 1 << 40
    rows = []
    for i, name in enumerate("abcd"):
        rows.append(
            {
                "kind": "alloc",
                "time_ns": i,
                "device": "GPU:0",
                "buffer_id": i,
                "address": base + i * 256 * KiB,
                "bytes": 256 * KiB,
                "requested_bytes": 256 * KiB,
                "op": name,
            }
        )
    for t, i in ((10, 1), (11, 3)):
        rows.append(
            {
                "kind": "free",
                "time_ns": t,
                "device": "GPU:0",
                "buffer_id": i,
                "address": base + i * 256 * KiB,
                "bytes": 256 * KiB,
            }
        )
    return rows


def unseen_rows():
    """The allocator already held 1000 bytes when the capture began: a 256-byte
    buffer (op MatMul) comes and goes over them."""
    common = {"device": "GPU:0", "buffer_id": 1, "bytes": 256, "address": 0, "fragmentation": 0.0}
    return [
        {"kind": "alloc", "time_ns": 1, "bytes_in_use": 1256, "op": "MatMul", **common},
        {"kind": "free", "time_ns": 2, "bytes_in_use": 1000, **common},
    ]
