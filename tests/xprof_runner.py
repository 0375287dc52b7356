"""XProf's own memory_profile converter, run in a process of its own (it loads
TensorFlow when that is installed), on XSpace files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from profiling import QUIET

XPROF = """
import json, sys
from xprof.convert.raw_to_tool_data import xspace_to_tool_data
out = {}
for path in sys.argv[1:]:
    data, _ = xspace_to_tool_data([path], "memory_profile", {})
    profile = json.loads(data)["memoryProfilePerAllocator"]
    out[path] = {
        name: {
            "peak": int(p["profileSummary"]["peakStats"]["peakBytesInUse"]),
            "peak_time_ps": int(p["profileSummary"]["peakStatsTimePs"]),
            "active": len(p.get("activeAllocations", [])),
            "at_peak": [
                {key: p["memoryProfileSnapshots"][int(a["snapshotIndex"])]["activityMetadata"]
                 .get(key, "") for key in ("tfOpName", "regionType", "dataType", "tensorShape")}
                for a in p.get("activeAllocations", []) if int(a["snapshotIndex"]) >= 0
            ],
            "stack": sum(int(s.get("allocationBytes", 0)) for s in p.get("specialAllocations", [])
                         if s.get("regionType") == "stack"),
        }
        for name, p in profile.items()
    }
print(json.dumps(out))
"""


def run_python(code: str, *args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **QUIET},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def xprof_memory_profile(*paths: Path) -> dict:
    return run_python(XPROF, *map(str, paths))
