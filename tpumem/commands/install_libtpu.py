"""`tpumem install-libtpu`: XLA:TPU (libtpu, about 700 MB) put where only tpumem's
compile process looks for it: `libtpu/` inside tpumem's environment, never its
site-packages. There, every `import jax` of the environment would load it and, on
a machine without a TPU, print TPU start-up errors (which `pip install jax[tpu]`
does); tpumem puts the directory on the path of its own compile process alone
(tpumem/tpu/compile.py)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

from tpumem.commands.requests import InstallLibtpuRequest
from tpumem.errors import TpumemError


def libtpu_requirement() -> str:
    """The libtpu release the installed JAX names for TPUs (`jax[tpu]`)."""
    try:
        named = requires("jax") or []
    except PackageNotFoundError:
        raise TpumemError(
            "--tpu compiles with JAX and libtpu: install JAX in tpumem's environment "
            "first (pip install 'tpumem[jax]')"
        ) from None
    for requirement in named:
        name = requirement.split(";")[0].strip()
        if name.startswith("libtpu") and 'extra == "tpu"' in requirement.replace("'", '"'):
            return name
    raise TpumemError("this JAX names no libtpu release for TPUs: pip install a newer jax")


def run_install_libtpu(request: InstallLibtpuRequest) -> int:
    directory = request.target or Path(sys.prefix) / "libtpu"
    requirement = libtpu_requirement()
    print(f"tpumem: installing {requirement} into {directory} (about 700 MB)", file=sys.stderr)
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--upgrade"]
    command += ["--target", str(directory), requirement]
    done = subprocess.run(command, stdout=sys.stderr)
    if done.returncode != 0:
        raise TpumemError(f"pip could not install {requirement} (its output is above)")
    use = (
        "--tpu uses it"
        if request.target is None
        else f"set TPUMEM_LIBTPU={directory} for --tpu to use it"
    )
    print(f"tpumem: libtpu is in {directory}; {use}", file=sys.stderr)
    return 0
