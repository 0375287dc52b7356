"""The process `tpumem fit` starts: the user's script, compiled for a TPU slice
and never run (`python -m tpumem.adapters.fit_runner REQUEST.json`).

It runs the script as Python would (script_target.py). When the script's
`import jax` finishes, it measures XLA:TPU's budget for a chip of the slice
where tpumem's cache lacks it (tpu_budget.py) and makes the script's devices the
slice's compile-only ones (jax/compile_only.py). Each compile, the budget and how
the script ended are written to the request's output file, a JSON line each, as
they happen. The parent set JAX_PLATFORMS, XLA_FLAGS and libtpu's path before
this process started, as JAX reads them once.
"""

from __future__ import annotations

import contextlib
import json
import linecache
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from typing import Any, TextIO

from tpumem.adapters.import_watch import ImportWatch, imported_frameworks
from tpumem.adapters.parent_death import die_with_parent
from tpumem.adapters.script_target import run_target, user_traceback
from tpumem.adapters.xla_dump import keep_dump_flags
from tpumem.trace.source_paths import user_path


class SetupFailed(Exception):
    """The slice's devices or XLA:TPU's budget could not be had: tpumem's, not the
    script's, to say."""


def _slice(request: dict[str, Any], out: TextIO) -> Any:
    """The slice's compile-only devices, its budget measured where not known, and
    the compile-only patches installed (just after `import jax` finished)."""
    try:
        return _made_slice(request, out)
    except Exception as error:
        raise SetupFailed(f"{type(error).__name__}: {error}".strip().splitlines()[0]) from error


def _made_slice(request: dict[str, Any], out: TextIO) -> Any:
    from tpumem.adapters.jax.compile_only import CompileOnly
    from tpumem.adapters.tpu_compile import slice_devices

    name = request.get("label") or request["topology"]  # (the trace's name for it)
    # libtpu says on stderr, as it starts, that this machine is no TPU VM: true, and
    # not the script's to show. Said only where the slice's devices are not made.
    with _quiet_stderr() as said:
        try:
            devices = slice_devices(request["topology"], request["dims"], request["slices"])
        except Exception:
            said.append(True)
            raise
    if request.get("measure_budget"):
        # Before the patches: the probes are plain compiles of their own.
        from tpumem.adapters.tpu_budget import budget_row

        out.write(budget_row(name, devices[0], request.get("libtpu", "")) + "\n")
        out.flush()
    compile_only = CompileOnly(
        name,
        list(devices),
        out,
        request["dump_dir"],
        search=request.get("search"),
        diagnose=request.get("diagnose", True),
        cache=request.get("compile_cache"),
    )
    compile_only.install()
    return compile_only


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[list[bool]]:
    """File descriptor 2 into a temporary file for the block (libtpu writes there
    from C++); its text is put back on stderr where the block appends to the list."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        failed: list[bool] = []
        try:
            yield failed
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            if failed:
                caught.seek(0)
                sys.stderr.write(caught.read().decode(errors="replace"))


def _causes(error: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    while error is not None and len(found) < 32:
        found.append(error)
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return found


def _where(error: BaseException, script: str) -> str:
    """The script's line the error came through (its innermost one), with its code."""
    tb = user_traceback(error, __file__)
    found = None
    ours = os.path.dirname(os.path.abspath(__file__))
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name == script or not (name.startswith(sys.prefix) or name.startswith(ours)):
            found = (name, tb.tb_lineno)
        tb = tb.tb_next
    if found is None:
        return ""
    code = linecache.getline(found[0], found[1]).strip()
    # (As every line is named: relative where near, whole where far.)
    where = user_path(found[0], os.getcwd())
    return f"{where}:{found[1]}" + (f": {code}" if code else "")


# What JAX says when an operation outside any jitted function runs on a device
# that only compiles (under `jax.set_mesh` of the slice's devices, eager
# operations run on them), and what to do about it.
EAGER_ON_THE_SLICE = "'Executable' object has no attribute"
EAGER_WHY = (
    "an operation outside a jitted function ran on the slice's devices, which only "
    "compile: under jax.set_mesh, JAX runs eager operations on the mesh; make the "
    "values inside a jitted function (jax.jit(init)) or before the mesh is set"
)


def main(request_path: str) -> int:
    with open(request_path) as handle:
        request = json.load(handle)
    # A compile nobody waits for any more ends with `tpumem fit`, at once: what it
    # compiled was for tpumem (SIGKILL: libtpu's handler prints no stack dump).
    die_with_parent(request.get("parent_pid"), signal.SIGKILL)
    out = open(request["out"], "a")  # noqa: SIM115 (open for the whole run)
    state: dict[str, Any] = {}

    def begin(framework: str) -> Any:
        state["framework"] = framework

        def imported() -> None:
            # (XLA reads XLA_FLAGS as the slice's devices are made, just below.)
            state["their_flags"] = keep_dump_flags(os.environ, request["dump_dir"], True)
            state["compile_only"] = _slice(request, out)

        return imported

    # JAX's import alone: a JAX script may import TensorFlow first (tf.data,
    # tensorflow_datasets); one that never imports JAX is said to at its end.
    watch = ImportWatch(begin, "jax")
    watch.install()
    script = os.path.abspath(request["target"])
    ending: dict[str, Any] = {"how": "finished", "code": 0}
    try:
        run_target(request["target"], request["args"], bool(request.get("module")))
    except SystemExit as stop:
        code = stop.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)  # as Python prints sys.exit("why")
            code = 1
        ending = {"how": "finished", "code": code or 0}
    except BaseException as error:  # the script stopped: where, and why
        message = f"{type(error).__name__}: {error}".strip()
        setup = next((e for e in _causes(error) if isinstance(e, SetupFailed)), None)
        if setup is not None:
            ending = {"how": "setup", "error": str(setup)}
        else:
            read = "ShapeDtypeStruct" in message
            said = message.splitlines()[0][:500] if message else type(error).__name__
            if EAGER_ON_THE_SLICE in message:
                said = f"{said} ({EAGER_WHY})"
            ending = {
                "how": "stopped",
                "error": said,
                "where": _where(error, script),
                # A value the script read from a stand-in: what was compiled stops there.
                "read": read,
            }
            if not read:  # the script's own error, shown as Python shows it
                trimmed = user_traceback(error, __file__)
                sys.excepthook(type(error), error.with_traceback(trimmed), trimmed)
    ending["others"] = [f for f in imported_frameworks() if f != "jax"]
    ending["framework"] = state.get("framework")
    ending["their_flags"] = state.get("their_flags")
    if "jax" in sys.modules:
        ending["framework_version"] = getattr(sys.modules["jax"], "__version__", None)
    out.write(json.dumps({"ending": ending}) + "\n")
    out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
