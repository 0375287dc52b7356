"""The training step's compiled program of each run, lined up for `compare`: the
program running at the run's peak, else the one with the largest plan (in a
training loop, the step). Its memory as XLA planned it on the run's backend, and,
where the run was compiled for a TPU (`--tpu`), as XLA:TPU planned it per chip.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from tpumem.analysis import provenance
from tpumem.analysis.compiled.program_heap import HeapBuffer
from tpumem.analysis.compiled.programs import CompiledProgram
from tpumem.analysis.compiled.tpu import TpuProgram, same_program
from tpumem.analysis.trace_figures import TraceAnalysis

RUNNING_AT_PEAK = "running at the peak"
LARGEST_PLAN = "the largest plan"
XLA_TPU = "XLA:TPU's compile, per chip"

NO_PROGRAM_DEFAULT = "no compiled program recorded"


@dataclass(frozen=True, slots=True)
class StepProgram:
    program: CompiledProgram
    chosen: str  # RUNNING_AT_PEAK or LARGEST_PLAN
    on_tpu: dict[str, TpuProgram | None]  # per topology the run was compiled for

    @property
    def largest_buffer(self) -> HeapBuffer | None:
        heap = self.program.heap
        return heap.live_at_peak[0] if heap is not None and heap.live_at_peak else None


def step_program(run: TraceAnalysis) -> StepProgram | None:
    if not run.compiled:
        return None
    running = [r for d in run.devices for r in d.programs_at_peak]
    if running:
        program, chosen = max(running, key=lambda r: r.temp_bytes).program, RUNNING_AT_PEAK
    else:
        program, chosen = run.compiled[0], LARGEST_PLAN
    on_tpu = {target.topology: same_program(target, program) for target in run.tpu}
    return StepProgram(program, chosen, on_tpu)


def no_program_reason(run: TraceAnalysis) -> str:
    """Why the run has no compiled program to show: what its framework declared
    (the trace's memory_settings), or that none was recorded."""
    settings = run.metadata.memory_settings
    return (settings.no_program if settings else None) or NO_PROGRAM_DEFAULT


Entry = tuple[int | float | str | None, str]  # (value, how it was obtained)


def program_figures(step: StepProgram) -> dict[str, Entry]:
    """The figures of one run's step program, keyed as PROGRAM_ROWS name them."""
    program, compiled = step.program, provenance.COMPILE_TIME
    memory, heap = program.memory, program.heap
    figures: dict[str, Entry] = {
        "name": (program.short_name, step.chosen),
        "peak": (program.peak_bytes, compiled),
    }
    if heap is not None:
        figures["arguments"] = (heap.parameter_bytes, compiled)
        figures["outputs"] = (heap.output_bytes, compiled)
        figures["temps"] = (heap.temp_peak_bytes, compiled)
        figures["peak_at"] = (heap.peak_instruction or None, compiled)
    elif memory is not None:
        figures["arguments"] = (memory.argument_bytes, compiled)
        figures["outputs"] = (memory.output_bytes, compiled)
        figures["temps"] = (memory.temp_bytes, compiled)
    if memory is not None:
        figures["aliased"] = (memory.alias_bytes, compiled)
        figures["code"] = (memory.generated_code_bytes, compiled)
    largest = step.largest_buffer
    if largest is not None:
        what = f"{largest.short_shape} {largest.short_op or largest.instruction}"
        if largest.source:
            what += f" ({os.path.basename(largest.source)})"
        figures["largest"] = (largest.bytes, compiled)
        figures["largest_what"] = (what, compiled)
    for topology, on_tpu in step.on_tpu.items():
        if on_tpu is not None:
            figures[f"tpu:{topology}"] = (on_tpu.need_bytes, XLA_TPU)
            figures[f"tpu-temps:{topology}"] = (on_tpu.temp_bytes, XLA_TPU)
    return figures
