"""The JSON report: every figure of the analysis under a versioned schema.

Schema "tpumem-report/1" (tpumem/report/schemas/tpumem-report-1.json; the rules in
docs/figures.md, "JSON report"): the run (framework, backend, source, complete,
duration_ns, total peak, warnings, metadata, programs (each with its memory plan
from XLA's buffer assignment, `heap`), fit advice, out_of_memory, capacity) and `devices`, one
object per device with `peak`, `preallocation`, `fragmentation`, `waste`, `padding`,
`timeline` and `counters`, each carrying its `label` (measured / derived / modeled /
not available). Bytes are integers, times are nanoseconds from the trace's start.

Every field is named here, not taken from the analysis' classes: renaming a field of
the analysis does not rename it in the report, whose readers are other programs.
"""

from __future__ import annotations

import json
import math
from typing import Any

from tpumem.analysis.advisor import FitAdvice
from tpumem.analysis.by_line import PeakLines
from tpumem.analysis.capacity import CapacityCheck
from tpumem.analysis.changes import Change
from tpumem.analysis.counters import Counters
from tpumem.analysis.fragmentation import Fragmentation
from tpumem.analysis.growth import Growth
from tpumem.analysis.kinds import KindBytes
from tpumem.analysis.largest_buffers import LargestBuffers
from tpumem.analysis.moments import Moments
from tpumem.analysis.oom import OutOfMemory
from tpumem.analysis.padding import LayoutPadding
from tpumem.analysis.peak import GROUP_KEYS, LiveGroup, PeakBreakdown
from tpumem.analysis.preallocation import Preallocation
from tpumem.analysis.program_heap import HeapBuffer, ProgramHeap
from tpumem.analysis.programs import CompiledProgram
from tpumem.analysis.run_figures import DeviceAnalysis, RunAnalysis
from tpumem.analysis.series import DeviceSeries
from tpumem.analysis.stacks import StackBytes
from tpumem.analysis.timeline import Timeline
from tpumem.analysis.tpu import TpuRefused, TpuTarget
from tpumem.analysis.waste import InternalWaste
from tpumem.hlo.refusals import Figure
from tpumem.report.fit_rows import fit_note
from tpumem.report.tpu_tables import tpu_verdict
from tpumem.trace.tpu_rows import MEMORY_FIELDS

SCHEMA = "tpumem-report/1"
# `report --program NAME -f json`: one of the report's "programs", on its own.
PROGRAM_SCHEMA = "tpumem-program/1"


def report_dict(analysis: RunAnalysis) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "path": analysis.path,
        "framework": analysis.framework,
        "backend": analysis.backend,
        "source": analysis.source,
        "complete": analysis.complete,
        "metadata": analysis.metadata.to_json(),
        "duration_ns": analysis.duration_ns,
        "devices": [_device(device) for device in analysis.devices],
        "total_peak_bytes": analysis.total_peak_bytes,
        "total_peak_time_ns": analysis.total_peak_time_ns,
        "warnings": list(analysis.warnings),
        "programs": [program_json(program) for program in analysis.compiled],
        "fit": None if analysis.fit is None else _fit(analysis.fit),
        "steps": analysis.steps,
        "out_of_memory": [_out_of_memory(oom) for oom in analysis.out_of_memory],
        "capacity": [_capacity(check) for check in analysis.capacity],
        "tpu": [_tpu(target) for target in analysis.tpu],
        "changes": [_change(change) for change in analysis.changes],
    }


def _change(change: Change) -> dict[str, Any]:
    return {
        "key": change.key,
        "device": change.device,
        "bytes": change.bytes,
        "how": change.how,
        "known": change.known,
        "program": change.program,
        "line": change.line,
        "names": list(change.names),
        "ops": list(change.ops),
        "start_bytes": change.start_bytes,
        "end_bytes": change.end_bytes,
        "pool_bytes": change.pool_bytes,
        "before_bytes": change.before_bytes,
        "topology": change.topology,
        "kept_in": change.kept.name if change.kept is not None else None,
        "kept_line": change.kept.line if change.kept is not None else None,
        "flops": change.flops,
        "flops_before": change.flops_before,
        "accumulate": change.accumulate,
    }


def _lines(lines: PeakLines) -> dict[str, Any]:
    return {
        "lines": [
            {
                "line": line.line,
                "bytes": line.bytes,
                "buffers": line.buffers,
                "program": line.program,
                "ops": list(line.ops),
                "unplaced": line.unplaced,
                "at_call": line.at_call,
                "regions": list(line.regions),
            }
            for line in lines.lines
        ],
        "programs": [
            {
                "program": p.name,
                "call": p.call,
                "temp_bytes": p.temp_bytes,
                "planned_bytes": p.planned_bytes,
                "rest_bytes": p.rest_bytes,
                "scale": p.scale,
                "opened": p.opened,
                "why": p.why or None,
            }
            for p in lines.programs
        ],
    }


def _tpu(target: TpuTarget) -> dict[str, Any]:
    fit = target.fit
    return {
        "topology": target.topology,
        "device_kind": target.device_kind,
        "compile_seconds": target.seconds,
        "programs": [
            {
                "name": program.name,
                "program_id": program.compile.program_id,
                "chips": program.compile.partitions,
                "need_bytes": program.need_bytes,
                **{name: program.memory(name) for name in MEMORY_FIELDS},
                "hbm_temp_bytes": program.temp_bytes,
                "padding_at_peak_bytes": program.padding_bytes if program.heap else None,
                "compile_seconds": program.compile.seconds,
                # (fit --sweep: read back from an earlier point's compile)
                "reused": program.compile.reused,
                "heap": None if program.heap is None else _heap(program.heap),
            }
            for program in target.programs
        ],
        "failed": [
            {"name": f.module, "program_id": f.program_id, "error": f.error} for f in target.failed
        ],
        "refused": [_refused(r) for r in target.refused],
        # Changes `tpumem fit` compiled in place of refused programs.
        "candidates": [
            {
                "program": c.compile.module,
                "change": c.change,
                "names": list(c.compile.change_names or ()),
                "need_bytes": c.need_bytes,
                "error": c.compile.error,
            }
            for c in target.candidates
        ],
        "cpu_forms": [
            {
                "program": f.program,
                "program_id": f.program_id,
                "what": f.what,
                "sources": list(f.sources),
            }
            for f in target.cpu_forms
        ],
        "budget": None
        if target.budget is None
        else {"usable_bytes": target.budget.usable_bytes, "libtpu": target.budget.libtpu},
        "verdict": tpu_verdict(target),
        "fit": None
        if fit is None
        else {
            "program": fit.program,
            "running_at_peak": fit.running_at_peak,
            "program_bytes": fit.program_bytes,
            "arrays_bytes": fit.arrays_bytes,
            "arrays_label": fit.arrays_label,
            "need_bytes": fit.need_bytes,
            "usable_bytes": fit.usable_bytes,
            "usable_label": fit.usable_label,
            "fits": fit.fits,
            "spare_bytes": fit.spare_bytes,
            "refused": fit.refused,
            "not_compiled": fit.not_compiled,
            "kinds": _kinds(fit.kinds),
        },
    }


def _refused(refused: TpuRefused) -> dict[str, Any]:
    """XLA:TPU's figures as its message rounds them, and the message whole."""
    figures = refused.refusal

    def figure(value: Figure | None) -> dict[str, int] | None:
        return (
            None
            if value is None
            else {"bytes": value.bytes, "rounding_bytes": value.rounding_bytes}
        )

    return {
        "name": refused.name,
        "program_id": refused.compile.program_id,
        "chips": refused.compile.partitions,
        "needed": figure(figures.needed),
        "available": figure(figures.available),
        "over": figure(figures.over),
        "message": refused.message,
        # Its plan on larger chips (not the target's own), where one was made.
        "diagnostic": None
        if refused.heap is None
        else {"topology": refused.diagnostic, "heap": _heap(refused.heap)},
    }


def _device(device: DeviceAnalysis) -> dict[str, Any]:
    return {
        "device": device.device,
        "fidelity": device.fidelity,
        "allocations": device.allocations,
        "frees": device.frees,
        "allocations_per_s": device.allocations_per_s,
        "peak": _peak(device.peak, device.peak_label),
        "preallocation": _preallocation(device.preallocation),
        "fragmentation": _fragmentation(device.fragmentation),
        "waste": _waste(device.waste),
        "padding": _padding(device.padding),
        "headroom_bytes": device.headroom_bytes,
        "headroom_label": device.headroom_label,
        "timeline": _timeline(device.timeline),
        "counters": _counters(device.counters),
        "series": None if device.series is None else _series(device.series),
        "programs_at_peak": [
            {
                "program": r.program.name,
                "program_id": r.program.program_id,
                "temp_bytes": r.temp_bytes,
            }
            for r in device.programs_at_peak
        ],
        "growth": None if device.growth is None else _growth(device.growth),
        "lines": None if device.lines is None else _lines(device.lines),
        "kinds": None if device.kinds is None else _kinds(device.kinds.kinds),
    }


def _growth(growth: Growth) -> dict[str, Any]:
    return {
        "steps": list(growth.steps),
        "end_bytes": list(growth.end_bytes),
        "warmup_steps": growth.warmup_steps,
        "per_step_bytes": growth.per_step_bytes,
        "growing": growth.growing,
        # Where no marks gave the steps: the program whose calls stood for them.
        "calls_of": growth.calls_of,
        "kept": None
        if growth.kept is None
        else {
            "name": growth.kept.name,
            "container": growth.kept.container,
            "arrays": growth.kept.arrays,
            "line": growth.kept.line,
        },
        "stacks": [
            {
                "per_step_bytes": g.per_step_bytes,
                "start_bytes": g.start_bytes,
                "end_bytes": g.end_bytes,
                "frames": _frames_json(g.frames),
            }
            for g in growth.stacks
        ],
    }


def _frames_json(frames: tuple) -> list[dict[str, Any]]:
    return [
        {"file": f.file, "line": f.line, "function": f.function, "code": f.code} for f in frames
    ]


def live_groups_json(groups: tuple[LiveGroup, ...]) -> list[dict[str, Any]]:
    return [
        {
            "op": group.op,
            "region": group.region,
            "dtype": group.dtype,
            "shape": group.shape,
            "source": group.source,
            "count": group.count,
            "bytes": group.bytes,
        }
        for group in groups
    ]


def _peak(peak: PeakBreakdown, label: str) -> dict[str, Any]:
    return {
        "bytes": peak.bytes,
        "time_ns": peak.time_ns,
        "last_time_ns": peak.last_time_ns,
        "step": peak.step,
        "phase": peak.phase,
        "live_buffers": peak.live_buffers,
        "unattributed_bytes": peak.unattributed_bytes,
        "held_before_capture_bytes": peak.held_before_capture_bytes,
        "gaps_before_peak": peak.gaps_before_peak,
        "stack_bytes": peak.stack_bytes,
        "groups": live_groups_json(peak.groups),
        "by_region": [{"region": region, "bytes": size} for region, size in peak.by_region],
        "stacks": stacks_json(peak.stacks),
        "label": label,
    }


def stacks_json(stacks: tuple[StackBytes, ...]) -> list[dict[str, Any]]:
    return [
        {
            "bytes": stack.bytes,
            "buffers": stack.buffers,
            "frames": _frames_json(stack.frames),
        }
        for stack in stacks
    ]


def _preallocation(pre: Preallocation) -> dict[str, Any]:
    return {
        "pool_peak_bytes": pre.pool_peak_bytes,
        "pool_at_peak_bytes": pre.pool_at_peak_bytes,
        "pool_label": pre.pool_label,
        "pool_source": pre.pool_source,
        "unused_bytes": pre.unused_bytes,
        "limit_bytes": pre.limit_bytes,
        "capacity_bytes": pre.capacity_bytes,
        "settings": dict(pre.settings),
        "smallest_fraction": pre.smallest_fraction,
    }


def _fragmentation(frag: Fragmentation) -> dict[str, Any]:
    return {
        "label": frag.label,
        "source": frag.source,
        "at_peak": frag.at_peak,
        "maximum": frag.maximum,
        "time_of_maximum_ns": frag.time_of_maximum_ns,
        "check_points": frag.check_points,
        "check_max_error": frag.check_max_error,
        "check_schedule": frag.check_schedule,
        "check_unavailable": frag.check_unavailable,
    }


def _waste(waste: InternalWaste) -> dict[str, Any]:
    return {
        "label": waste.label,
        "at_peak_bytes": waste.at_peak_bytes,
        "at_peak_share": waste.at_peak_share,
        "total_allocated_bytes": waste.total_allocated_bytes,
        "total_requested_bytes": waste.total_requested_bytes,
    }


def _padding(padding: LayoutPadding) -> dict[str, Any]:
    return {
        "label": padding.label,
        "extra_bytes": padding.extra_bytes,
        "row_major_extra_bytes": padding.row_major_extra_bytes,
        "counted_bytes": padding.counted_bytes,
        "uncounted_bytes": padding.uncounted_bytes,
        "included": padding.included,
        "largest": [
            {
                "shape": shape.shape,
                "dtype": shape.dtype,
                "count": shape.count,
                "bytes": shape.bytes,
                "extra_bytes": shape.extra_bytes,
            }
            for shape in padding.largest
        ],
    }


def _timeline(timeline: Timeline) -> dict[str, Any]:
    return {
        "start_ns": timeline.start_ns,
        "end_ns": timeline.end_ns,
        "in_use_max": list(timeline.in_use_max),
        "fragmentation_max": list(timeline.fragmentation_max),
    }


def _counters(counters: Counters) -> dict[str, Any]:
    return {
        "samples": counters.samples,
        "reported_peak_bytes": counters.reported_peak_bytes,
        "sampled_peak_bytes": counters.sampled_peak_bytes,
        "pool_bytes": counters.pool_bytes,
        "limit_bytes": counters.limit_bytes,
    }


def _series(series: DeviceSeries) -> dict[str, Any]:
    return {
        "events": series.events,
        "time_ns": list(series.time_ns),
        "step_position": None if series.step_position is None else list(series.step_position),
        "in_use": list(series.in_use),
        "regions": [[region, list(values)] for region, values in series.regions],
        "pool": None if series.pool is None else list(series.pool),
        "fragmentation": list(series.fragmentation),
        "gaps_ns": [[start, end] for start, end in series.gaps_ns],
        "span_ns": list(series.span_ns),
        "detail": [
            {
                "stretches": level.stretches,
                # Times as steps from the one before (the first from 0), the last
                # event after the highest, the lowest and last bytes below the
                # highest: small numbers, a small page.
                "time_step_ns": _steps(level.time_ns),
                "high": list(level.high),
                "low_below": _below(level.high, level.low),
                "last_after_ns": [e - t for t, e in zip(level.time_ns, level.last_ns, strict=True)],
                "last_below": _below(level.high, level.last),
            }
            for level in series.detail
        ],
        "moments": None if series.moments is None else _moments(series.moments),
        "largest": None if series.largest is None else _largest(series.largest),
    }


def _steps(times: tuple[int, ...]) -> list[int]:
    return [t - before for before, t in zip((0, *times[:-1]), times, strict=True)]


def _below(high: tuple[int, ...], values: tuple[int, ...]) -> list[int]:
    return [h - v for h, v in zip(high, values, strict=True)]


def _moments(moments: Moments) -> dict[str, Any]:
    return {
        "groups": [dict(zip(GROUP_KEYS, key, strict=True)) for key in moments.groups],
        "event_index": list(moments.event_index),
        "time_ns": list(moments.time_ns),
        "until_ns": list(moments.until_ns),
        "in_use": list(moments.in_use),
        "live_bytes": list(moments.live_bytes),
        "live_buffers": list(moments.live_buffers),
        "stack": list(moments.stack),
        "unattributed": list(moments.unattributed),
        # Per moment, [group, bytes, buffers] of its largest groups, and the rest's.
        "top": [[list(row) for row in rows] for rows in moments.top],
        "rest_bytes": list(moments.rest_bytes),
        "rest_buffers": list(moments.rest_buffers),
        "peak": moments.peak,
    }


def _largest(largest: LargestBuffers) -> dict[str, Any]:
    return {
        "allocations": largest.allocations,
        "stacks": [_frames_json(stack) for stack in largest.stacks],
        "buffers": [
            {
                "start_ns": b.start_ns,
                "end_ns": b.end_ns,
                "bytes": b.bytes,
                "offset": b.offset,
                "stack": b.stack,
                **dict(zip(GROUP_KEYS, b.labels, strict=True)),
            }
            for b in largest.buffers
        ],
    }


def program_json(program: CompiledProgram) -> dict[str, Any]:
    memory, heap = program.memory, program.heap
    return {
        "name": program.name,
        "program_id": program.program_id,
        "framework_name": None if memory is None else memory.name,
        "devices": [] if memory is None else list(memory.devices),
        "argument_bytes": None if memory is None else memory.argument_bytes,
        "output_bytes": None if memory is None else memory.output_bytes,
        "alias_bytes": None if memory is None else memory.alias_bytes,
        "temp_bytes": None if memory is None else memory.temp_bytes,
        "generated_code_bytes": None if memory is None else memory.generated_code_bytes,
        "compiled_at_ns": None if memory is None else memory.compiled_at_ns,
        "unavailable": None if memory is None else memory.unavailable,
        "peak_bytes": program.peak_bytes,
        "heap": None if heap is None else _heap(heap),
        "hlo_problem": program.hlo_problem,
    }


def _heap(heap: ProgramHeap) -> dict[str, Any]:
    return {
        "module_id": heap.module_id,
        "entry_computation": heap.entry_computation,
        "memory_space": heap.memory_space,
        "peak_bytes": heap.peak_bytes,
        "peak_unpadded_bytes": heap.peak_unpadded_bytes,
        "peak_position": heap.peak_position,
        "peak_instruction": heap.peak_instruction,
        "whole_program_bytes": heap.whole_program_bytes,
        "parameter_bytes": heap.parameter_bytes,
        "output_bytes": heap.output_bytes,
        "total_allocation_bytes": heap.total_allocation_bytes,
        "has_heap_trace": heap.has_heap_trace,
        "heap_bytes": list(heap.heap_bytes),
        "live_at_peak": [_heap_buffer(buffer) for buffer in heap.live_at_peak],
    }


def _heap_buffer(buffer: HeapBuffer) -> dict[str, Any]:
    return {
        "bytes": buffer.bytes,
        "unpadded_bytes": buffer.unpadded_bytes,
        "kind": buffer.group,
        "instruction": buffer.instruction,
        "opcode": buffer.opcode,
        "shape": buffer.shape,
        "dtype": buffer.dtype,
        "dims": buffer.dims,
        "op": buffer.op_name,
        "source": buffer.source,
        "stack": buffer.stack,
        "logical_buffer_id": buffer.logical_buffer_id,
        "allocation": buffer.allocation,
    }


def _fit(fit: FitAdvice) -> dict[str, Any]:
    return {
        "device": fit.device,
        "peak_bytes": fit.peak_bytes,
        "headroom_bytes": fit.headroom_bytes,
        "headroom_label": fit.headroom_label,
        "padding_bytes": fit.padding_bytes,
        "padding_label": fit.padding_label,
        "rows": [
            {
                "accelerator": row.accelerator,
                "kind": row.kind,
                "memory_bytes": row.memory_bytes,
                "needed_bytes": row.needed_bytes,
                "fits": row.fits,
                "share": row.share,
                "setting": row.setting,
                "source": row.source,
                "smallest_capacity_bytes": row.smallest_capacity_bytes,
                "compiled_for": row.compiled_for,
                # (A kernel refused for on-chip VMEM: needed_bytes is the budget, the
                # HBM need not known.)
                "refused_for_vmem": row.refused_for_vmem,
            }
            for row in fit.rows
        ],
        "notes": [fit_note(note) for note in fit.notes],
    }


def _out_of_memory(oom: OutOfMemory) -> dict[str, Any]:
    return {
        "phase": oom.phase,
        "source": oom.source,
        "message": oom.message,
        "device": oom.device,
        "time_ns": oom.time_ns,
        "step": oom.step,
        "op": oom.op,
        "shape": oom.shape,
        "dtype": oom.dtype,
        "requested_bytes": oom.requested_bytes,
        "in_use_bytes": oom.in_use_bytes,
        "in_use_label": oom.in_use_label,
        "limit_bytes": oom.limit_bytes,
        "free_bytes": oom.free_bytes,
        "largest_free_block_bytes": oom.largest_free_block_bytes,
        "verdict": oom.verdict,
        "short_by_bytes": oom.short_by_bytes,
        "live": live_groups_json(oom.live),
        "live_bytes": oom.live_bytes,
        "compiled_largest": [
            {"bytes": a.bytes, "shape": a.shape, "op": a.op, "source": a.source}
            for a in oom.compiled_largest
        ],
        "location": oom.location,
        "causes": [
            {
                "cause": c.cause,
                "bytes": c.bytes,
                "share": c.share,
                "how": c.how,
                "asked_bytes": c.asked_bytes,
                "given_bytes": c.given_bytes,
                "count": c.count,
                "program": c.program,
                "steps": list(c.steps) if c.steps is not None else None,
                "line": c.line,
            }
            for c in oom.causes
        ],
    }


def _capacity(check: CapacityCheck) -> dict[str, Any]:
    return {
        "device": check.device,
        "capacity_bytes": check.capacity_bytes,
        "label": check.label,
        "pool_growth": check.pool_growth,
        "failure": None if check.failure is None else _out_of_memory(check.failure),
        "headroom_bytes": check.headroom_bytes,
        "tightest_time_ns": check.tightest_time_ns,
        "tightest_step": check.tightest_step,
        "smallest_bytes": check.smallest_bytes,
        "unplaced_frees": check.unplaced_frees,
    }


def finite(value: Any) -> Any:
    """`value` with every NaN or infinity as null: JSON has no such numbers, and
    strict parsers refuse Python's `NaN` and `Infinity`."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value


def dump(body: Any, **options: Any) -> str:
    """Strict JSON. (Walked for NaNs only where the encoder found one: a page's
    arrays hold a million numbers.)"""
    try:
        return json.dumps(body, allow_nan=False, **options)
    except ValueError:
        return json.dumps(finite(body), allow_nan=False, **options)


def render_program_json(
    program: CompiledProgram,
    *,
    width: int = 100,
    color: bool = False,
    analysis: RunAnalysis | None = None,
) -> str:
    """One program in full: `tpumem report --program NAME -f json`."""
    return dump({"schema": PROGRAM_SCHEMA, **program_json(program)}, indent=2) + "\n"


def render_json(analysis: RunAnalysis, *, width: int = 100, color: bool = False) -> str:
    """(Width and color are the terminal's: JSON has neither.)"""
    return dump(report_dict(analysis), indent=2) + "\n"


def _kinds(kinds: tuple[KindBytes, ...]) -> list[dict[str, Any]]:
    return [{"kind": k.kind, "bytes": k.bytes, "how": list(k.how)} for k in kinds]
