"""`tpumem fit SCRIPT --gpu H100-80GB`: will a PyTorch script's model fit on that
GPU, told without one.

The script runs in a process of its own on fake tensors for a few optimizer
steps (adapters/torch/fake_tensors.py): nothing is computed, and each storage
its ops make is an allocation of its exact bytes, at its line, of its kind.
Those allocations are replayed through the model of PyTorch's caching
allocator, capped at what the GPU leaves PyTorch (analysis/gpus.py): the
verdict, the peak allocated and reserved, and the smallest memory that holds
the run. The trace (`<script>.fit.tpumem`) is a trace like any other: `tpumem
report` reads it, with what the peak is and the lines that made it.

With --sweep NAME=V1,V2,...: a run at each value of the script's --NAME, and
the largest that fits each GPU (a number above one that did not fit on every
GPU is not run).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tpumem.analysis.gpus import LT_WORKSPACE, GpuVerdict, gpu_verdict
from tpumem.commands.fit_names import default_name
from tpumem.commands.requests import FitRequest
from tpumem.errors import TpumemError
from tpumem.units import counted

if TYPE_CHECKING:
    from tpumem.analysis.gpus import Gpu
    from tpumem.analysis.trace_figures import TraceAnalysis

GPU_STEPS = 3  # fit --gpu's optimizer steps unless --steps says
HOW = "on fake tensors (PyTorch's FakeTensorMode: nothing computed, no GPU used)"


def fit_on_gpus(request: FitRequest) -> int:
    from tpumem.analysis.gpus import gpu_named
    from tpumem.commands.fit_inputs import check_inputs

    if request.tpu:
        raise TpumemError("fit: give --tpu or --gpu, not both (one run answers one kind)")
    if request.search is not None or request.slices != 1:
        raise TpumemError("fit --gpu: --search and --slices are for --tpu")
    gpus = [gpu_named(name) for name in request.gpu]
    check_inputs(request)
    if request.sweeps:
        return _swept(request, gpus)
    traces = _runs(request, gpus, request.output or default_name(request))
    verdicts, steps = _verdicts(traces, gpus, request)
    _print_verdicts(request, verdicts, steps)
    return 0 if all(v.fits for v in verdicts) else 1


def _runs(request: FitRequest, gpus: list[Gpu], default: Path) -> dict[str, Path]:
    """A run for each size of cuBLAS's workspace among the GPUs (an A100's is not
    an H100's), the first at `default`, the others beside it named by their
    GPU: each GPU's trace, by its name."""
    traces: dict[str, Path] = {}
    sizes: dict[int, Path] = {}
    for gpu in gpus:
        if gpu.workspace_bytes not in sizes:
            name = default
            if sizes:
                tag = "".join(c if c.isalnum() else "-" for c in gpu.name)
                name = default.with_name(f"{default.name.removesuffix('.tpumem')}-{tag}.tpumem")
            sizes[gpu.workspace_bytes] = _fake_run(request, gpu, name)
        traces[gpu.name] = sizes[gpu.workspace_bytes]
    return traces


def _fake_run(request: FitRequest, gpu: Gpu, default: Path) -> Path:
    """The script's steps on fake tensors, as on `gpu` (its cuBLAS workspace):
    the trace."""
    from tpumem.adapters import CaptureOptions
    from tpumem.commands.unrecorded import unrecorded_line
    from tpumem.launch.launcher import LaunchRequest, run_profiled
    from tpumem.outputs import default_trace

    steps = request.steps or GPU_STEPS
    path = default
    if request.output is None or path != request.output:
        path, descriptor = default_trace(default, ())
        os.close(descriptor)
    if not request.quiet:
        print(
            f"tpumem fit: {request.target}: up to {steps} optimizer steps {HOW}",
            file=sys.stderr,
            flush=True,
        )
    capture = CaptureOptions(
        programs=False,
        fit_steps=steps,
        fit_gpu=gpu.name,
        fit_workspace_bytes=gpu.workspace_bytes,
        fit_lt_workspace_bytes=LT_WORKSPACE,
    )
    launch = LaunchRequest(
        target=request.target,
        module=request.module,
        args=list(request.args),
        output=path,
        framework="torch",
        capture=capture,
        force=True,  # (the name was taken above, or given with --force checked)
        stdout_to_stderr=bool(request.sweeps),  # (a sweep's stdout: its table alone)
    )
    outcome = run_profiled(launch)
    if outcome.unrecorded is not None:
        raise TpumemError(f"fit --gpu: {unrecorded_line(request.target, outcome)}")
    if outcome.trace is None or not outcome.trace.exists():
        raise TpumemError("fit --gpu: the script's process ended before it made its trace")
    if outcome.returncode != 0:
        why, values, steps = _ending(outcome.trace)
        if not (values and steps):
            raise TpumemError(
                f"fit --gpu: the script ended with exit status {outcome.returncode} "
                f"({why}); what ran is in {outcome.trace}",
                exit_code=2,
            )
        # As a TPU's fit stops at the first value read: the steps before it answer.
        print(
            f"tpumem fit: the script stopped after {counted(steps, 'optimizer step')}, where it "
            f"needed a tensor's values ({why}): the answer covers what ran before",
            file=sys.stderr,
        )
    print(f"tpumem: trace written to {outcome.trace}", file=sys.stderr)
    return outcome.trace


# What PyTorch raises where a fake tensor is asked for what it does not have.
_FAKE_TENSOR_ERRORS = (
    "DataDependentOutputException",
    "DynamicOutputShapeException",
    "FakeTensor",
    "not supported for tensor subclasses",
)


def _ending(trace: Path) -> tuple[str, bool, int]:
    """Why the script failed, as its trace recorded it; whether for a tensor's
    values, which fake tensors do not have; the optimizer steps it made."""
    from tpumem.analysis.device_events import step_marks
    from tpumem.trace.reader import load

    try:
        loaded = load(trace)
        ending, steps = loaded.metadata.exit, len(step_marks(loaded)[0])
    except TpumemError:
        ending, steps = None, 0
    # (its first line, without the terminal's colours some libraries' messages carry)
    said = re.sub(r"\x1b\[[0-9;]*m", "", (ending.exception if ending is not None else None) or "")
    if any(name in said for name in _FAKE_TENSOR_ERRORS):
        why = (
            "a fake tensor has no values: .numpy(), .tolist() and an op whose size depends "
            "on them cannot run on one; its error is above"
        )
        return why, True, steps
    return (
        (f"{said.splitlines()[0][:200]}; its error is above" if said else "its error is above"),
        False,
        steps,
    )


def _analysed(trace: Path, capacity: int) -> TraceAnalysis:
    from tpumem.reading.analyses import analysed

    analysis = analysed(trace, str(trace), capacity=capacity)
    if not analysis.devices or not analysis.capacity:
        raise TpumemError(f"fit --gpu: {trace}: the run made no tensor: nothing to fit")
    return analysis


def _verdicts(
    traces: dict[str, Path], gpus: list[Gpu], request: FitRequest
) -> tuple[list[GpuVerdict], int]:
    """Each GPU's verdict, and the optimizer steps its run made; the first's
    report printed (what the peak is, its lines)."""
    verdicts, steps = [], 0
    for number, gpu in enumerate(gpus):
        analysis = _analysed(traces[gpu.name], gpu.usable_bytes)
        if number == 0:
            steps = analysis.steps
            if not request.quiet:
                _print_report(request, analysis)
        verdicts.append(gpu_verdict(gpu, analysis))
    return verdicts, steps


def _print_report(request: FitRequest, analysis: TraceAnalysis) -> None:
    from tpumem.report import reporter_for

    reporter = reporter_for(None, "text")
    # (The answer alone, as on a terminal, and without the advice's line on every
    # accelerator: the verdicts below are this fit's, with what PyTorch can have of
    # each GPU.)
    shown = replace(analysis, fit=None)
    text = reporter.render(shown, width=_width(request), color=sys.stdout.isatty(), full=False)
    sys.stdout.write(text)


def _print_verdicts(request: FitRequest, verdicts: list[GpuVerdict], steps: int) -> None:
    from tpumem.report.text import render_gpu_verdicts

    sys.stdout.write(
        render_gpu_verdicts(verdicts, steps, width=_width(request), color=sys.stdout.isatty())
    )


def _swept(request: FitRequest, gpus: list[Gpu]) -> int:
    """A run at each value of the first --sweep (one only: a GPU's verdict is the
    batch's), then a table: each value's peak and each GPU's verdict."""
    from tpumem.analysis.compiled.sweep import number
    from tpumem.commands.fit_sweep import with_argument
    from tpumem.report.text import render_gpu_sweep

    if len(request.sweeps) > 1:
        raise TpumemError(
            "fit --gpu: one --sweep (the batch's); give the others' values as arguments"
        )
    (sweep,) = request.sweeps
    numbers = all(number(v) is not None for v in sweep.values)
    rows: list[tuple[str, list[GpuVerdict] | None]] = []
    refused: float | None = None  # the smallest value no GPU held
    refused_value = ""
    for done, value in enumerate(sweep.values):
        if numbers and refused is not None and (number(value) or 0) > refused:
            rows.append((value, None))
            continue
        if not request.quiet:
            print(
                f"tpumem fit: --{sweep.name} {value} ({done + 1} of {len(sweep.values)})",
                file=sys.stderr,
                flush=True,
            )
        at = replace(request, args=with_argument(request.args, sweep.name, value), quiet=True)
        traces = _runs(at, gpus, default_name(request, f"-{sweep.name}-{value}"))
        verdicts = [gpu_verdict(g, _analysed(traces[g.name], g.usable_bytes)) for g in gpus]
        rows.append((value, verdicts))
        if numbers and not any(v.fits for v in verdicts):
            value_number = number(value) or 0
            if refused is None or value_number < refused:
                refused, refused_value = value_number, value
    sys.stdout.write(
        render_gpu_sweep(
            sweep.name,
            [g.name for g in gpus],
            rows,
            f"--{sweep.name} {refused_value} fit no GPU",
            width=_width(request),
            color=sys.stdout.isatty(),
        )
    )
    return 0 if all(any(v[i].fits for _, v in rows if v) for i in range(len(gpus))) else 1


def _width(request: FitRequest) -> int:
    from tpumem.commands.options import text_width

    return text_width(request.width, sys.stdout)
