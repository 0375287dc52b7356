"""`--tpu`: compile a run's programs for a TPU topology, after the run, in a JAX
process of their own (adapters/tpu_compile.py), and keep what XLA:TPU said in the
trace as `tpu` rows (trace/tpu_rows.py): a later report reads them, compiling
nothing again.

The programs are those the run's XLA dump recorded as their framework handed them
to XLA; each distinct one compiles once. libtpu compiles for any TPU on any
machine: it is found in the directory TPUMEM_LIBTPU names, else in tpumem's
site-packages (where `pip install jax[tpu]` puts it), else in `libtpu/` inside
tpumem's environment (where `tpumem install-libtpu` puts it, so that the
environment's own `import jax` does not load it).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from importlib.util import find_spec
from pathlib import Path

from tpumem.errors import TpumemError
from tpumem.hlo.schema import HloError, parse_hlo_proto
from tpumem.hlo.shardings import partitions
from tpumem.tpu.budget_cache import cached_budget, remember_budget
from tpumem.tpu.topology import Topology
from tpumem.trace.hlo_rows import hlo_rows
from tpumem.trace.model import Trace
from tpumem.trace.schema import TPU
from tpumem.trace.tpu_rows import (
    TpuBudget,
    TpuCompile,
    budget_row_text,
    compile_row_text,
    read_tpu_row,
    tpu_rows,
)

LIBTPU_VARIABLE = "TPUMEM_LIBTPU"
NEEDS = (
    "--tpu needs libtpu (Google's TPU compiler, about 700 MB; no TPU needed): "
    "tpumem install-libtpu, or set TPUMEM_LIBTPU to a directory holding it"
)
MAX_SHAPES = 256  # array shapes sized by XLA:TPU, largest groups first


@dataclass(frozen=True, slots=True)
class CompileOutcome:
    programs: int  # distinct programs compiled
    failed: int
    seconds: float  # the whole compile process, start to end
    already: bool = False  # the trace held this topology's compiles


def libtpu_path() -> str | None:
    """The directory to put on the compile's PYTHONPATH ("" where tpumem's own
    Python imports libtpu); None when there is none."""
    named = os.environ.get(LIBTPU_VARIABLE)
    if named:
        return named if (Path(named) / "libtpu").is_dir() else None
    if find_spec("libtpu") is not None:
        return ""
    beside = Path(sys.prefix) / "libtpu"
    return str(beside) if (beside / "libtpu").is_dir() else None


def libtpu_version(libtpu: str) -> str:
    """The release of the libtpu at `libtpu` (libtpu_path's answer); "" unknown."""
    if libtpu == "":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("libtpu")
        except PackageNotFoundError:
            return ""
    found = sorted(Path(libtpu).glob("libtpu-*.dist-info"))
    return found[-1].name[len("libtpu-") : -len(".dist-info")] if found else ""


def compiled_topologies(trace: Trace) -> dict[str, bool]:
    """The topologies the trace's programs were compiled for, each with whether
    XLA:TPU's budget for it is there too (traces of tpumem before 0.x lack it)."""
    found: dict[str, bool] = {}
    for row in tpu_rows(trace):
        found[row.topology] = found.get(row.topology, False) or isinstance(row, TpuBudget)
    return found


def _programs(trace: Trace, directory: Path) -> tuple[list[dict], dict[str, list[dict]]]:
    """The distinct programs to compile (their HLO written to `directory`), and
    every program by the digest of its HLO (one compile answers them all)."""
    distinct: list[dict] = []
    every: dict[str, list[dict]] = {}
    for row in hlo_rows(trace):
        if row is None or row.input_data is None:
            continue
        digest = hashlib.sha256(row.input_data).hexdigest()[:16]
        try:
            module = parse_hlo_proto(row.input_data).hlo_module
        except HloError:
            continue
        program = {
            "program_id": row.program_id,
            "module": module.name,
            "partitions": partitions(module),
        }
        if digest not in every:
            path = directory / f"{digest}.hlo.pb"
            path.write_bytes(row.input_data)
            distinct.append({**program, "hlo_file": str(path), "digest": digest})
            every[digest] = []
        every[digest].append(program)
    return distinct, every


def _shapes(trace: Trace) -> list[tuple[list[int], str]]:
    """The array shapes live at each device's peak, to be sized in TPU layouts."""
    from tpumem.analysis.device_events import split_by_device
    from tpumem.analysis.peak import peak_breakdown
    from tpumem.hlo.tiles import parse_shape

    seen: dict[tuple[tuple[int, ...], str], None] = {}
    for events in split_by_device(trace):
        for group in sorted(peak_breakdown(trace, events).groups, key=lambda g: -g.bytes):
            dims = parse_shape(group.shape)
            if dims is not None and group.dtype:
                seen.setdefault((dims, group.dtype), None)
    return [(list(dims), dtype) for dims, dtype in list(seen)[:MAX_SHAPES]]


def compile_environment(
    libtpu: str, dump: str, flags: str = ""
) -> tuple[dict[str, str], dict[str, str]]:
    """(the environment of a process that compiles for TPUs, what was set in it):
    JAX on the CPU (the TPU is a compile target, never a device), libtpu on the
    path, XLA's dump of each compile after `flags` (the XLA_FLAGS kept)."""
    env = dict(os.environ)
    changes = {
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"{flags} --xla_dump_to={dump} --xla_dump_hlo_as_proto".strip(),
        # libtpu asks the cloud metadata server where it runs unless told it runs alone.
        "TPU_SKIP_MDS_QUERY": env.get("TPU_SKIP_MDS_QUERY", "1"),
        # libtpu takes a machine-wide lock (/tmp/libtpu_lockfile) for the TPU; a
        # compile touches no TPU, and must work beside another compile or a training job.
        "ALLOW_MULTIPLE_LIBTPU_LOAD": env.get("ALLOW_MULTIPLE_LIBTPU_LOAD", "1"),
    }
    paths = [p for p in (libtpu, env.get("PYTHONPATH", "")) if p]
    if libtpu:
        changes["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(changes)
    return env, changes


def refuse_live(trace_path: Path) -> None:
    """The compiles are added to a trace whose run has ended: a writer still at it
    would write its next rows over them (trace/live.py)."""
    from tpumem.trace.live import writing_process_at

    writer = writing_process_at(trace_path)
    if writer is not None:
        raise TpumemError(
            f"{trace_path}: still being written (by process {writer}); --tpu adds to a "
            "trace whose run has ended: run it again then"
        )


def compile_for_tpu(
    trace_path: Path, trace: Trace, topology: Topology, quiet: bool
) -> CompileOutcome:
    """Compiles the trace's programs for `topology` and appends what XLA:TPU said
    to the trace. TpumemError where libtpu is missing, no program can be, or the
    trace is still being written."""
    from tpumem.trace.amend import append_rows, check_whole

    refuse_live(trace_path)
    compiled_before = compiled_topologies(trace)
    if compiled_before.get(topology.name):
        return CompileOutcome(0, 0, 0.0, already=True)
    # Compiled before XLA:TPU's budget was kept: the budget alone is added.
    budget_only = topology.name in compiled_before
    # The compiles are kept in the trace: only in a whole one, where a reader finds them.
    if trace.damaged:
        raise TpumemError(
            f"{trace_path}: damaged after its first {trace.table.num_rows:,} rows; "
            "nothing added, nothing changed"
        )
    check_whole(trace_path)
    libtpu = libtpu_path()
    if libtpu is None:
        raise TpumemError(NEEDS)
    with tempfile.TemporaryDirectory(prefix="tpumem-tpu-") as work:
        directory = Path(work)
        distinct, every = ([], {}) if budget_only else _programs(trace, directory)
        if not distinct and not budget_only:
            raise TpumemError(
                f"{trace_path}: no program to compile for a TPU: the trace holds no "
                "program's HLO as its framework handed it to XLA (recorded by tpumem "
                "profile with programs on, JAX, PyTorch/XLA or TensorFlow with XLA)"
            )
        (directory / "dump").mkdir()
        out = directory / "compiled.jsonl"
        release = libtpu_version(libtpu)
        known = cached_budget(release, topology.generation)
        request = {
            "topology": topology.name,
            "dims": list(topology.dims),
            "programs": distinct,
            "arrays": [] if budget_only else _shapes(trace),
            "dump_dir": str(directory / "dump"),
            "out": str(out),
            "measure_budget": known is None,
            "libtpu": release,
        }
        (directory / "request.json").write_text(json.dumps(request))
        start = time.perf_counter()
        returncode, error = 0, ""
        if distinct or known is None:  # (else the cache answers all that is asked)
            returncode, error = _run(directory, libtpu, len(distinct), topology, quiet)
        seconds = time.perf_counter() - start
        lines = out.read_text().splitlines() if out.exists() else []
    if known is not None:
        lines.append(budget_row_text(TpuBudget(topology.name, known, release)))
    rows, failed, compiled = [], 0, 0
    for line in lines:
        record = read_tpu_row(line)
        if record is None:
            continue
        if isinstance(record, TpuBudget) and known is None:
            remember_budget(record.libtpu or release, topology.generation, record.usable_bytes)
        texts = [line]
        if isinstance(record, TpuCompile) and compiled < len(distinct):
            # One line per distinct program, in the request's order: every program
            # of the same HLO gets the answer, under its own id.
            failed += record.error is not None
            same = every[distinct[compiled]["digest"]]
            texts = [compile_row_text(replace(record, program_id=p["program_id"])) for p in same]
            compiled += 1
        rows += [{"kind": TPU, "time_ns": 0, "text": text} for text in texts]
    if rows:
        refuse_live(trace_path)  # (a run given its name with --force meanwhile)
        append_rows(trace_path, rows)
    if returncode != 0 and (distinct or budget_only) and not compiled:
        raise TpumemError(f"compiling for {topology.name} failed: {error}")
    failed += len(distinct) - compiled  # those a killed compile never reached
    return CompileOutcome(len(distinct), failed, seconds)


def _run(
    directory: Path, libtpu: str, count: int, topology: Topology, quiet: bool
) -> tuple[int, str]:
    """Runs the compile process, showing its progress on stderr; (exit status,
    the last line it wrote to stderr)."""
    command = [sys.executable, "-m", "tpumem.adapters.tpu_compile", str(directory / "request.json")]
    env, _ = compile_environment(libtpu, str(directory / "dump"))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out = directory / "compiled.jsonl"
    with open(directory / "stderr.txt", "wb") as errors:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors, env=env)
        try:
            if quiet or not sys.stderr.isatty():
                process.wait()
            else:
                _show_progress(process, out, count, topology)
        except KeyboardInterrupt:
            process.kill()
            process.wait()
            raise
    text = (directory / "stderr.txt").read_text(errors="replace").strip().splitlines()
    tail = next((line for line in reversed(text) if "Error" in line), text[-1] if text else "")
    return process.returncode, tail[:300] or f"exit status {process.returncode}"


def _show_progress(process: subprocess.Popen, out: Path, count: int, topology: Topology) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(f"compiling for {topology.name} (XLA:TPU)", total=count)
        while process.poll() is None:
            done = out.read_text().count("\n") if out.exists() else 0
            progress.update(task, completed=min(done, count))
            time.sleep(0.2)
