"""`tpumem fit SCRIPT --tpu SLICE`: will the script's model fit on that TPU slice,
compiled by XLA:TPU and never run.

For each slice, the script runs in a process of its own (adapters/fit_runner.py)
that sees the slice's compile-only TPU devices: each jitted call is compiled for
them and returns shaped stand-ins. What XLA:TPU said (each program's plan or its
refusal, and its budget for a chip) becomes a trace (`<script>.fit.tpumem`), whose
report answers per slice; the exit status is 1 where a slice does not fit.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from tpumem.commands.requests import FitRequest
from tpumem.errors import TpumemError


def run_fit(request: FitRequest) -> int:
    from tpumem.tpu.compile import NEEDS, libtpu_path, libtpu_version

    if not request.tpu:
        raise TpumemError("fit: give the slice to fit with --tpu (e.g. --tpu v5e-8)")
    if request.sweep is not None and request.output is not None:
        raise TpumemError(
            "--sweep writes a trace per value (<script>.fit-NAME-VALUE.tpumem): give no -o"
        )
    if not request.module:
        _check_script(Path(request.target))
    libtpu = libtpu_path()
    if libtpu is None:
        raise TpumemError(NEEDS.replace("--tpu needs", "fit needs"))
    release = libtpu_version(libtpu)
    if request.output is not None and request.output.exists() and not request.force:
        raise TpumemError(
            f"{request.output}: exists; use --force to replace it, or -o another name"
        )
    short: set[str] = set()
    if request.sweep is None:
        trace = _compiled(request, libtpu, release, _default_name(request), short)
        return _report(request, trace, short)
    results = []
    name = request.sweep.name
    for value in request.sweep.values:
        at = replace(request, args=with_argument(request.args, name, value))
        default = _default_name(request, f"-{name}-{value}")
        results.append((value, _compiled(at, libtpu, release, default, short)))
    return _sweep_report(request, results, short)


def with_argument(args: tuple[str, ...], name: str, value: str) -> tuple[str, ...]:
    """The script's arguments with --NAME set to `value`: in place where given
    (`--NAME V` or `--NAME=V`), else added at the end."""
    flag = f"--{name}"
    changed = list(args)
    for index, arg in enumerate(changed):
        if arg == flag and index + 1 < len(changed):
            changed[index + 1] = value
            return tuple(changed)
        if arg.startswith(flag + "="):
            changed[index] = f"{flag}={value}"
            return tuple(changed)
    return (*changed, flag, value)


def _compiled(
    request: FitRequest, libtpu: str, release: str, default: Path, short: set[str]
) -> Path:
    """The script compiled for each slice, written as a trace; its path. The
    slices where the script did not get through are added to `short`."""
    rows: list[str] = []
    notes: list[str] = []
    versions: set[str] = set()
    set_by_tpumem: dict[str, str] = {}
    for topology in request.tpu:
        texts, ending, environment = _fit_one(request, topology, libtpu, release)
        rows += texts
        set_by_tpumem = environment
        if ending.get("framework_version"):
            versions.add(str(ending["framework_version"]))
        said, through = _ending_notes(request, label(request, topology), ending)
        notes += said
        if not through:
            short.add(label(request, topology))
    return _write_trace(request, default, rows, notes, versions, set_by_tpumem)


def _default_name(request: FitRequest, suffix: str = "") -> Path:
    stem = request.target.rsplit(".", 1)[-1] if request.module else Path(request.target).stem
    # A value becomes part of a file name: what a name may not hold is left out.
    kept = "".join(c if c.isalnum() or c in "._-" else "_" for c in suffix)
    return Path(f"{stem}.fit{kept}.tpumem")


def _check_script(path: Path) -> None:
    if not path.exists():
        raise TpumemError(f"{path}: no such file")
    if not path.is_file():
        raise TpumemError(f"{path}: not a regular file, so not a Python script")


def _fit_one(
    request: FitRequest, topology: Any, libtpu: str, release: str
) -> tuple[list[str], dict[str, Any], dict[str, str]]:
    """The script compiled for one slice: (its `tpu` rows, how it ended, what
    tpumem set in its environment)."""
    from tpumem.tpu.budget_cache import cached_budget, remember_budget
    from tpumem.tpu.compile import compile_environment
    from tpumem.trace.tpu_rows import TpuBudget, TpuCompile, budget_row_text, read_tpu_row

    known = cached_budget(release, topology.generation)
    if not request.quiet:
        print(
            f"tpumem fit: compiling {request.target} for {label(request, topology)} "
            f"({_chips(topology.chips * request.slices)}) with XLA:TPU, never running it",
            file=sys.stderr,
            flush=True,
        )
    with tempfile.TemporaryDirectory(prefix="tpumem-fit-") as work:
        directory = Path(work)
        (directory / "dump").mkdir()
        out = directory / "compiled.jsonl"
        order = {
            "target": request.target,
            "args": list(request.args),
            "module": request.module,
            "topology": topology.name,
            "label": label(request, topology),
            "slices": request.slices,
            "dims": list(topology.dims),
            "out": str(out),
            "dump_dir": str(directory / "dump"),
            "measure_budget": known is None,
            "libtpu": release,
        }
        (directory / "request.json").write_text(json.dumps(order))
        # The script's own XLA_FLAGS kept, XLA's dump after them.
        env, changes = compile_environment(
            libtpu, str(directory / "dump"), os.environ.get("XLA_FLAGS", "")
        )
        command = [
            sys.executable,
            "-m",
            "tpumem.adapters.fit_runner",
            str(directory / "request.json"),
        ]
        try:
            status = subprocess.run(command, env=env).returncode
        except KeyboardInterrupt:
            raise TpumemError(
                f"fit for {label(request, topology)}: interrupted; nothing written"
            ) from None
        lines = out.read_text(errors="replace").splitlines() if out.exists() else []
    changes["XLA_FLAGS"] = changes["XLA_FLAGS"].replace(
        str(directory / "dump"), "<a temporary directory>"
    )
    texts: list[str] = []
    programs = 0
    ending: dict[str, Any] = {"how": "killed", "status": status}
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line a killed process left half written
        if isinstance(record, dict) and isinstance(record.get("ending"), dict):
            ending = record["ending"]
            continue
        row = read_tpu_row(line)
        if row is None:
            continue
        if isinstance(row, TpuBudget) and known is None:
            remember_budget(row.libtpu or release, topology.generation, row.usable_bytes)
        texts.append(line)
        programs += isinstance(row, TpuCompile)
    ending["programs"] = programs
    if known is not None:
        texts.append(budget_row_text(TpuBudget(label(request, topology), known, release)))
    return texts, ending, changes


def _ending_notes(
    request: FitRequest, topology: str, ending: dict[str, Any]
) -> tuple[list[str], bool]:
    """How the script ended under compile-only devices, in words for the report,
    and whether it got through (to its end, or to the first value it read); a
    script that never imported JAX, or a slice tpumem could not set up, is an
    error."""
    how, compiled = ending.get("how"), ending.get("programs", 0)
    if how == "setup":
        raise TpumemError(f"fit for {topology}: {ending.get('error')}")
    if ending.get("framework") is None:
        if how == "finished" and ending.get("code"):
            raise TpumemError(
                f"{request.target} exited with status {ending['code']} before it imported JAX"
            )
        others = ", ".join(ending.get("others") or [])
        if others and how != "killed":
            raise TpumemError(
                f"{request.target} uses {others}, not JAX: tpumem fit compiles JAX programs "
                "without running them; for TensorFlow and PyTorch/XLA, tpumem profile --tpu "
                "SLICE runs the script on this machine and compiles its programs for the slice"
            )
        if how != "killed":
            raise TpumemError(
                f"{request.target} never imported JAX: nothing was compiled for {topology}"
            )
    others = ", ".join(ending.get("others") or [])
    if not compiled and others and how != "killed":
        # (Keras on TensorFlow imports JAX too: a script that compiled nothing of
        # JAX's and imported another framework is that framework's.)
        raise TpumemError(
            f"{request.target} uses {others}, and compiled nothing with JAX: tpumem fit "
            "compiles JAX programs without running them; for TensorFlow and PyTorch/XLA, "
            "tpumem profile --tpu SLICE runs the script on this machine and compiles its "
            "programs for the slice"
        )
    where = f" at {ending['where']}" if ending.get("where") else ""
    if how == "stopped" and ending.get("read"):
        return [
            f"{topology}: the script stopped{where}: it read a value that was only compiled "
            f"({ending.get('error')}); every program it called before that is compiled here"
        ], True
    if how == "stopped":
        return [f"{topology}: the script failed{where}: {ending.get('error')}"], False
    if how == "killed":
        status = ending.get("status")
        return [f"{topology}: the compiling process ended without a word (status {status})"], False
    if ending.get("code"):
        return [f"{topology}: the script exited with status {ending['code']}"], False
    return ([] if compiled else [f"{topology}: the script called no jitted function"]), True


def _write_trace(
    request: FitRequest,
    default: Path,
    rows: list[str],
    notes: list[str],
    versions: set[str],
    set_by_tpumem: dict[str, str],
) -> Path:
    from tpumem import __version__
    from tpumem.outputs import create_trace, default_trace
    from tpumem.trace.metadata import COMPILED_ONLY
    from tpumem.trace.schema import TPU
    from tpumem.trace.writer import TraceWriter

    if request.output is not None:
        path, descriptor = request.output, create_trace(request.output, (), request.force)
    else:
        path, descriptor = default_trace(default, ())
    metadata = {
        "framework": "jax",
        "framework_version": next(iter(versions), None) if len(versions) == 1 else None,
        "source": COMPILED_ONLY,
        "command": (*(["-m"] if request.module else []), request.target, *request.args),
        "cwd": os.getcwd(),
        "host": platform.node(),
        "python": platform.python_version(),
        "tpumem_version": __version__,
        "set_by_tpumem": set_by_tpumem,
        "warnings": (
            "compiled only, never run: the script saw each slice's compile-only TPU "
            "devices, and each jitted call was compiled for them by XLA:TPU and returned "
            "shaped stand-ins",
            *notes,
        ),
    }
    with TraceWriter(descriptor, metadata) as writer:
        for text in rows:
            writer.record(TPU, time_ns=0, text=text)
    return path


def _report(request: FitRequest, trace: Path, short: set[str]) -> int:
    """The report of the slices, on stdout; 0 where every one fits and the script
    got through, else 1."""
    from tpumem.reading.analyses import analysed
    from tpumem.report import reporter_for

    analysis = analysed(trace, str(trace))
    color = sys.stdout.isatty()
    print(reporter_for(None, None).render(analysis, width=request.width, color=color), end="")
    print(f"tpumem: trace written to {trace}", file=sys.stderr)
    _say_short(short)
    answered = {t.topology: t.fit for t in analysis.tpu}
    fits = all((f := answered.get(label(request, t))) is not None and f.fits for t in request.tpu)
    return 0 if fits and not short else 1


def _say_short(short: set[str]) -> None:
    for topology in sorted(short):
        print(
            f"tpumem: the script did not get through on {topology} (the report says where): "
            "the answer covers only the programs it called before",
            file=sys.stderr,
        )


def _sweep_report(request: FitRequest, results: list[tuple[str, Path]], short: set[str]) -> int:
    """The sweep's table on stdout; 0 where some value fits every slice, else 1."""
    from tpumem.reading.analyses import analysed
    from tpumem.report.text import render_sweep_text

    assert request.sweep is not None
    slices = [label(request, t) for t in request.tpu]
    answers = []
    for value, trace in results:
        analysis = analysed(trace, str(trace))
        answers.append((value, {t.topology: t for t in analysis.tpu}))
    color = sys.stdout.isatty()
    text = render_sweep_text(request.sweep.name, slices, answers, width=request.width, color=color)
    print(text, end="")
    for _, trace in results:
        print(f"tpumem: trace written to {trace}", file=sys.stderr)
    _say_short(short)
    fitting = {
        topology
        for _, found in answers
        for topology, target in found.items()
        if target.fit is not None and target.fit.fits
    }
    return 0 if set(slices) <= fitting else 1


def label(request: FitRequest, topology: Any) -> str:
    """The slice as the trace and the report name it: `v5e:2x4`, or with
    --slices, `v5e:2x4 x2` (its generation still the name's first part)."""
    return topology.name if request.slices == 1 else f"{topology.name} x{request.slices}"


def _chips(count: int) -> str:
    return f"{count:,} chip{'s' if count != 1 else ''}"
