"""`tpumem fit SCRIPT --tpu SLICE`: will the script's model fit on that TPU slice,
compiled by XLA:TPU and never run.

For each slice, a JAX script runs in a process of its own (adapters/fit_runner.py)
that sees the slice's compile-only TPU devices: each jitted call is compiled for
them and returns shaped stand-ins. What XLA:TPU said (each program's plan or its
refusal, and its budget for a chip) becomes a trace (`<script>.fit.tpumem`), whose
report answers per slice; the exit status is 1 where a slice does not fit.
TensorFlow and PyTorch/XLA cannot lower for devices they do not have: a script of
theirs takes the HLO route (HLO_ROUTE), a run here by `tpumem profile --tpu`.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from tpumem.commands.fit_inputs import check_inputs, inputs
from tpumem.commands.fit_names import default_name, label, say_short
from tpumem.commands.fit_stops import (
    FitStopped,
    run_compiling,
    run_passing_on,
    say_stopped,
    stopped_by,
)
from tpumem.commands.options import text_width
from tpumem.commands.requests import FitRequest
from tpumem.errors import TpumemError
from tpumem.units import counted


def run_fit(request: FitRequest) -> int:
    from tpumem.tpu.compile import NEEDS, libtpu_path, libtpu_version

    if request.gpu:
        from tpumem.commands.fit_gpu import fit_on_gpus

        return fit_on_gpus(request)
    if request.steps is not None:
        raise TpumemError("fit: --steps is for --gpu (a TPU's fit compiles every program)")

    if not request.tpu:
        raise TpumemError(
            "fit: give the slice to fit with --tpu (e.g. --tpu v5e-8), or for a PyTorch "
            "script the GPU with --gpu (e.g. --gpu H100-80GB)"
        )
    check_inputs(request)
    libtpu = libtpu_path()
    if libtpu is None:
        raise TpumemError(NEEDS.replace("--tpu needs", "fit needs"))
    release = libtpu_version(libtpu)
    short: set[str] = set()
    framework = None if request.module else _hlo_framework(Path(request.target))
    if not request.sweeps:
        try:
            trace = _compiled(request, libtpu, release, default_name(request), short, framework)
        except FitStopped as stop:  # what was compiled before, then how it was stopped
            if stop.trace is not None:
                _report(request, stop.trace, short)
            return say_stopped(stop)
        return _report(request, trace, short)
    from tpumem.commands.fit_sweep import run_sweep

    return run_sweep(
        request,
        lambda at, default: _compiled(at, libtpu, release, default, short, framework),
        short,
    )


# The frameworks fit takes the HLO route for: what they hand XLA is compiled for
# the slice after a run on this machine (profile --tpu), as neither can lower a
# program for devices it does not have. Their names as imported.
HLO_ROUTE = ("tensorflow", "torch_xla")


def _title(framework: str) -> str:
    """The framework's name as its users write it (its package declares it)."""
    from tpumem.adapters.base import declared

    facts = declared(framework)
    return (facts.words.title if facts is not None else None) or framework


class _NotJax(Exception):
    """The script turned out to be another framework's (named)."""


def _hlo_framework(script: Path) -> str | None:
    """The framework of HLO_ROUTE the script imports where it imports no JAX or
    Keras (whose backend may be JAX); None otherwise, or where it does not parse."""
    import ast

    try:
        tree = ast.parse(script.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return None
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    if names & {"jax", "keras", "flax"}:
        return None
    # A module of the script's own may import JAX: then the run decides.
    here = script.resolve().parent
    if any((here / f"{n}.py").exists() or (here / n).is_dir() for n in names):
        return None
    return next((f for f in ("torch_xla", "tensorflow") if f in names), None)


def _through_a_run(request: FitRequest, default: Path, framework: str, short: set[str]) -> Path:
    """The HLO route: the script run on this machine by `tpumem profile --tpu`,
    its programs compiled for each slice; PyTorch/XLA given as many CPU devices as
    a slice has chips (CPU_NUM_DEVICES), so its meshes are the slice's. A run that
    fails adds the slices to `short`: the answer covers what it compiled."""
    name = _title(framework)
    chips = {t.chips for t in request.tpu}
    if request.slices > 1:
        raise TpumemError(f"fit of a {name} script: no --slices ({name} is run here)")
    if framework == "torch_xla" and len(chips) > 1:
        raise TpumemError(
            f"fit of a {name} script: give slices of one size ({name} is run here, "
            "on one count of devices a run)"
        )
    if request.search:
        print(
            f"tpumem fit: --search changes a JAX script's jitted calls; a {name} script's "
            "programs are compiled as it ran them, and nothing is searched",
            file=sys.stderr,
        )
    env = dict(os.environ)
    how = (
        f"({name} cannot compile for devices it does not have) and compiled its programs "
        f"for the slice as {name} handed them to XLA"
    )
    said = [f"fit ran the script on this machine {how}"]
    set_here: dict[str, str] = {}
    wanted = str(max(chips))
    if framework == "torch_xla":
        if env.get("CPU_NUM_DEVICES", wanted) != wanted:
            said.append(
                f"CPU_NUM_DEVICES={env['CPU_NUM_DEVICES']} (yours) kept: the slice has "
                f"{wanted} chips, so a mesh over every device is not the slice's"
            )
        elif "CPU_NUM_DEVICES" not in env:
            env["CPU_NUM_DEVICES"] = set_here["CPU_NUM_DEVICES"] = wanted
    elif max(chips) > 1:
        said.append(
            "TensorFlow ran on one device: each program is compiled for one chip of the "
            "slice, as one replica of a data-parallel job holds it"
        )
    if not request.quiet:
        cpus = counted(int(wanted), "CPU device")
        devices = f", on {cpus} (CPU_NUM_DEVICES)" if set_here else ""
        print(
            f"tpumem fit: {request.target}: running it here{devices} with tpumem profile "
            f"--tpu {how}",
            file=sys.stderr,
            flush=True,
        )
    path = request.output
    if path is None:
        from tpumem.outputs import default_trace

        # (The name taken now, replaced by profile's trace: --force below.)
        path, descriptor = default_trace(default, ())
        os.close(descriptor)
    command = [sys.executable, "-m", "tpumem", "profile", "-q", "--force", "-o", str(path)]
    command += [arg for t in request.tpu for arg in ("--tpu", t.name)]
    command += [*(["-m"] if request.module else []), request.target, *request.args]
    status = run_passing_on(command, env)
    if path.exists() and path.stat().st_size == 0:
        path.unlink()  # (the name taken above, never written)
    stopped = stopped_by(status)
    where = ", ".join(label(request, t) for t in request.tpu)
    if not path.exists():
        if stopped is not None:
            raise FitStopped(stopped, None, where)
        raise TpumemError(f"fit: the {name} run ended with status {status}, nothing written")
    if status != 0 and stopped is None:
        short.update(label(request, t) for t in request.tpu)
    _say_routed(path, said, set_here)
    if stopped is not None:
        raise FitStopped(stopped, path, where)
    return path


def _say_routed(path: Path, said: list[str], set_here: dict[str, str]) -> None:
    """The trace says how fit got its programs, and what fit set for the run."""
    from tpumem.reading.summary_files import summary_kept
    from tpumem.trace.amend import append_metadata
    from tpumem.trace.reader import load

    try:
        metadata = load(path).metadata
    except (TpumemError, OSError):
        return  # (the report of it says what is wrong with it)
    with summary_kept(path):  # (its profile's summary, made again for it)
        append_metadata(
            path,
            set_by_tpumem={**(metadata.set_by_tpumem or {}), **set_here},
            warnings=tuple(said),  # (a patch's warnings add to the trace's)
        )


def _compiled(
    request: FitRequest,
    libtpu: str,
    release: str,
    default: Path,
    short: set[str],
    framework: str | None = None,
) -> Path:
    """The script compiled for each slice, written as a trace; its path. The
    slices where the script did not get through are added to `short`. A script
    of a framework of HLO_ROUTE goes that route."""
    if framework is not None:
        return _through_a_run(request, default, framework, short)
    try:
        return _compiled_jax(request, libtpu, release, default, short)
    except _NotJax as found:
        return _through_a_run(request, default, str(found), short)


def _compiled_jax(
    request: FitRequest, libtpu: str, release: str, default: Path, short: set[str]
) -> Path:
    rows: list[str] = []
    notes: list[str] = []
    versions: set[str] = set()
    set_by_tpumem: dict[str, str] = {}
    compiled = 0
    for topology in request.tpu:
        texts, ending, environment = _fit_one(request, topology, libtpu, release)
        rows += texts
        compiled += ending["programs"]
        set_by_tpumem = environment
        if ending.get("framework_version"):
            versions.add(str(ending["framework_version"]))
        said, through = _ending_notes(request, label(request, topology), ending)
        notes += _flags_note(label(request, topology), ending) + said
        if ending["how"] == "interrupted":  # (no slice after it is compiled)
            trace = None
            if compiled:
                trace = _write_trace(request, default, rows, notes, versions, set_by_tpumem)
            raise FitStopped(ending["signal"], trace, label(request, topology))
        if not through:
            short.add(label(request, topology))
    return _write_trace(request, default, rows, notes, versions, set_by_tpumem)


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
            f"({_chips(topology.chips * request.slices)}) with XLA:TPU (jitted calls compiled, "
            "not run)",
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
            "parent_pid": os.getpid(),  # (it dies with this process: PR_SET_PDEATHSIG)
            "search": request.search,
            "diagnose": not request.sweeps,
            "compile_cache": None if request.compile_cache is None else str(request.compile_cache),
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
        doing = f"tpumem fit: compiling for {label(request, topology)} with XLA:TPU"
        status, stopped = run_compiling(command, env, doing)
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
    if stopped is not None:  # (tpumem ended it: what it said of its ending is not how)
        ending = {"how": "interrupted", "signal": stopped}
    ending["programs"] = programs
    if known is not None:
        texts.append(budget_row_text(TpuBudget(label(request, topology), known, release)))
    return texts, ending, changes


def _flags_note(topology: str, ending: dict[str, Any]) -> list[str]:
    """Where the script replaced XLA_FLAGS after tpumem set them (fit_runner.py)."""
    theirs = ending.get("their_flags")
    if theirs is None:
        return []
    return [
        f"{topology}: the script set XLA_FLAGS itself ({theirs or 'empty'}); tpumem added "
        "its dump of XLA's plans after the script's flags (XLA reads them once)"
    ]


def _ending_notes(
    request: FitRequest, topology: str, ending: dict[str, Any]
) -> tuple[list[str], bool]:
    """How the script ended under compile-only devices, in words for the report,
    and whether it got through (to its end, or to the first value it read); a
    script that never imported JAX, or a slice tpumem could not set up, is an
    error."""
    how, compiled = ending.get("how"), ending.get("programs", 0)
    if how == "interrupted":
        name = signal.Signals(ending["signal"]).name
        return [
            f"{topology}: tpumem fit was stopped ({name}) as it compiled: every program "
            "compiled before is here"
        ], False
    if how == "setup":
        raise TpumemError(f"fit for {topology}: {ending.get('error')}")
    if ending.get("framework") is None:
        if how == "finished" and ending.get("code"):
            raise TpumemError(
                f"{request.target} exited with status {ending['code']} before it imported JAX"
            )
        routed = [f for f in ending.get("others") or [] if f in HLO_ROUTE]
        if routed and how != "killed":
            raise _NotJax(routed[0])
        if how != "killed":
            raise TpumemError(
                f"{request.target} never imported JAX: nothing was compiled for {topology}"
            )
    routed = [f for f in ending.get("others") or [] if f in HLO_ROUTE]
    if not compiled and routed and how != "killed":
        # (Keras on TensorFlow imports JAX too: a script that compiled nothing of
        # JAX's and imported another framework is that framework's.)
        raise _NotJax(routed[0])
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
        path = request.output
        descriptor = create_trace(path, inputs(request), request.force)
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
    print(
        reporter_for(None, None).render(
            analysis, width=text_width(request.width, sys.stdout), color=color
        ),
        end="",
    )
    print(f"tpumem: trace written to {trace}", file=sys.stderr)
    say_short(short)
    answered = {t.topology: t.fit for t in analysis.tpu}
    fits = all((f := answered.get(label(request, t))) is not None and f.fits for t in request.tpu)
    return 0 if fits and not short else 1


def _chips(count: int) -> str:
    return counted(count, "chip")
