"""What the TPU tests' independent compiles need: a JAX process that compiles for
TPUs with JAX's own ahead-of-time API and the libtpu tpumem uses."""

from __future__ import annotations

import os

from tpumem.tpu.compile import libtpu_path


def aot_env() -> dict[str, str]:
    found = libtpu_path()
    assert found is not None, "libtpu is not installed: make setup puts it in .venv/libtpu"
    path = os.pathsep.join(p for p in (found, os.environ.get("PYTHONPATH", "")) if p)
    return {"JAX_PLATFORMS": "cpu", "PYTHONPATH": path, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
