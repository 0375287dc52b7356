"""An imported TPU profile counts the program stack as XProf does: XProf's
memory_profile takes an allocator's bytes_reserved (the stack the TPU runtime
reserves for a program) into its peak, beside bytes_allocated (the heap)."""

from __future__ import annotations

import json

from conftest import run_tpumem
from xprof_runner import xprof_memory_profile
from xspace_builder import build_space

MIB = 1 << 20
LIMIT = 16 * 1024 * MIB  # a v5e chip's HBM
FIRST_EVENT_PS = 10**9  # 1 ms


def _event(offset_ps: int, alloc: bool, address: int, size: int, heap: int, stack: int) -> dict:
    return {
        "name": "MemoryAllocation" if alloc else "MemoryDeallocation",
        "offset_ps": offset_ps,
        "stats": {
            "allocator_name": ("ref", "TPU_0_bfc"),
            "addr": address,
            "allocation_bytes": size,
            "requested_bytes": size,
            "bytes_allocated": heap,
            "bytes_reserved": stack,
            "bytes_available": LIMIT - heap - stack,
            "peak_bytes_in_use": heap,
            "tf_op": ("ref", f"op{address}"),
            "region_type": ("ref", "output"),
            "data_type": 14,  # bfloat16
            "shape": "[1024,1024]",
        },
    }


def _profile() -> bytes:
    """The heap alone peaks at t=2 (150 MiB); once a program's 80 MiB stack is
    reserved, heap + stack peaks later, at t=3 (100 + 80 MiB)."""
    ms = FIRST_EVENT_PS
    return build_space(
        [
            _event(1 * ms, True, 1, 100 * MIB, heap=100 * MIB, stack=0),
            _event(2 * ms, True, 2, 50 * MIB, heap=150 * MIB, stack=0),
            _event(3 * ms, False, 2, 50 * MIB, heap=100 * MIB, stack=80 * MIB),
            _event(4 * ms, True, 3, 10 * MIB, heap=110 * MIB, stack=40 * MIB),
            _event(5 * ms, False, 1, 100 * MIB, heap=10 * MIB, stack=40 * MIB),
        ],
        signed=True,
    )


def test_an_imported_tpu_profile_counts_the_stack_as_xprof_does(tmp_path):
    xplane = tmp_path / "tpu.xplane.pb"
    xplane.write_bytes(_profile())
    xprof = xprof_memory_profile(xplane)[str(xplane)]["TPU_0_bfc"]
    trace = tmp_path / "tpu.tpumem"
    result = run_tpumem("import", str(xplane), "-o", str(trace))
    assert result.returncode == 0, result.stderr
    result = run_tpumem("report", str(trace), "--format", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    (device,) = report["devices"]
    peak = device["peak"]
    # XProf's peak, its time (XProf keeps the last moment at the peak) and its stack.
    assert peak["bytes"] == xprof["peak"] == 180 * MIB
    # XProf's time is the event's offset on its line, tpumem's from its first event.
    assert peak["last_time_ns"] * 1000 == xprof["peak_time_ps"] - FIRST_EVENT_PS
    assert xprof["at_peak"] == [
        {
            "tfOpName": g["op"],
            "regionType": g["region"],
            "dataType": g["dtype"],
            "tensorShape": g["shape"],
        }
        for g in peak["groups"]
    ]
    assert peak["stack_bytes"] == xprof["stack"] == 80 * MIB
    assert {"region": "stack", "bytes": 80 * MIB} in peak["by_region"]
    # The heap at the peak is the one live buffer: nothing unattributed.
    assert peak["live_buffers"] == 1 and peak["unattributed_bytes"] == 0

    markdown = run_tpumem("report", str(trace), "--format", "md").stdout
    assert "1 buffer; 80.0 MiB reserved by the runtime as stack" in markdown

    # Exported back for TensorBoard, XProf reads the same peak and stack.
    logdir = tmp_path / "tb"
    result = run_tpumem("export", "tensorboard", str(trace), "--logdir", str(logdir))
    assert result.returncode == 0, result.stderr
    (exported,) = (logdir / "plugins" / "profile").glob("*/*.xplane.pb")
    again = xprof_memory_profile(exported)[str(exported)]
    (allocator,) = again.values()
    assert allocator["peak"] == 180 * MIB and allocator["stack"] == 80 * MIB
