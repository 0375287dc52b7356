"""XProf's own memory_profile converter, run in a process of its own (it loads
TensorFlow when that is installed), on XSpace files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import conftest
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


# XProf's memory_viewer, as TensorBoard runs it, on every program of a profile dir.
MEMORY_VIEWER = """
import json, pathlib
from xprof.convert.raw_to_tool_data import xspace_to_tool_data, xspace_to_tool_names
directory = pathlib.Path({directory!r})
xplane = str(next(directory.glob("*.xplane.pb")))
# As TensorBoard does: listing the tools extracts the programs the XSpace carries.
tools = xspace_to_tool_names([xplane])
out = {{}}
for path in sorted(directory.glob("*.hlo_proto.pb")):
    module = path.name.removesuffix(".hlo_proto.pb")
    data, _ = xspace_to_tool_data([xplane], "memory_viewer", {{"module_name": module}})
    out[module] = json.loads(data)
print(json.dumps({{"tools": list(tools), "modules": out}}))
"""


def memory_viewer(profile_dir: Path) -> dict:
    """Each program's memory_viewer data, by the name XProf gives it."""
    found = conftest.run_python(MEMORY_VIEWER.format(directory=str(profile_dir)), profile_dir)
    assert "memory_viewer" in found["tools"]
    return found["modules"]
