"""The JSON report: every figure of the analysis under a versioned schema.

Schema "tpumem-report/1" (tpumem/report/schemas/tpumem-report-1.json, generated
from the shapes below by `python -m tpumem.report.schema_files`; the rules in
docs/figures.md, "JSON report"): the run (framework, backend, source, complete,
duration_ns, total peak, warnings, metadata, programs (each with its memory plan
from XLA's buffer assignment, `heap`), fit advice, out_of_memory, capacity) and
`devices`, one object per device with `peak`, `preallocation`, `fragmentation`,
`waste`, `padding`, `timeline` and `counters`, each carrying its `label`
(measured / derived / modeled / not available). Bytes are integers, times are
nanoseconds from the trace's start.

Each object's keys are declared once, below (json_shapes.py): the same
declaration writes the JSON and its schema. Keys are named here, not taken from
the analysis' classes: renaming a field of the analysis does not rename it in
the report, whose readers are other programs.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from tpumem.analysis import provenance
from tpumem.analysis.advisor import FitAdvice, FitRow
from tpumem.analysis.allocators.capacity import CapacityCheck
from tpumem.analysis.by_line import NO_PLAN, NO_TEMPORARIES, LineBytes, OpenedProgram
from tpumem.analysis.changes import KEYS, Change
from tpumem.analysis.compiled.cpu_forms import CpuForm
from tpumem.analysis.compiled.program_heap import (
    CONSTANT,
    OUTPUT,
    PARAMETER,
    TEMPORARY,
    HeapBuffer,
    ProgramHeap,
)
from tpumem.analysis.compiled.programs import CompiledProgram
from tpumem.analysis.compiled.tpu import TpuFit
from tpumem.analysis.counters import Counters
from tpumem.analysis.drawing.largest_buffers import BufferLife
from tpumem.analysis.drawing.moments import Moments
from tpumem.analysis.drawing.series import DeviceSeries
from tpumem.analysis.drawing.timeline import Timeline
from tpumem.analysis.fragmentation import Fragmentation
from tpumem.analysis.growth import Growth, StackGrowth
from tpumem.analysis.kinds import KINDS, KindBytes
from tpumem.analysis.oom import COMPILE as COMPILE_VERDICT
from tpumem.analysis.oom import FRAGMENTED, KILLED, LIMIT, NOT_ENOUGH, OutOfMemory
from tpumem.analysis.oom_causes import OomCause
from tpumem.analysis.oom_messages import CompiledAllocation
from tpumem.analysis.padding import LayoutPadding, PaddedShape
from tpumem.analysis.peak import GROUP_KEYS, LiveGroup, PeakBreakdown
from tpumem.analysis.preallocation import Preallocation
from tpumem.analysis.stacks import StackBytes
from tpumem.analysis.trace_figures import DeviceAnalysis, TraceAnalysis
from tpumem.analysis.waste import InternalWaste
from tpumem.hlo.refusals import Figure
from tpumem.report.fit_rows import fit_note
from tpumem.report.json_shapes import (
    BOOL,
    INT,
    NUMBER,
    STRING,
    AnyOf,
    Array,
    Const,
    Fixed,
    Named,
    Object,
    Optional,
    Shape,
    Written,
    encoded_record,
    fields,
    item,
    key,
    one_of,
    record,
    register,
)
from tpumem.report.tpu_tables import tpu_verdict
from tpumem.trace.metadata import EXTRAS, TraceMetadata
from tpumem.trace.stack_rows import Frame
from tpumem.trace.tpu_rows import MEMORY_FIELDS

SCHEMA = "tpumem-report/1"
# `report --program NAME -f json`: one of the report's "programs", on its own.
PROGRAM_SCHEMA = "tpumem-program/1"

LABEL = STRING  # how a figure was obtained (analysis/provenance.py)
KIND = one_of(*KINDS)
KNOWN = one_of(
    provenance.EXACT,
    provenance.MEASURED,
    provenance.MODELED,
    provenance.ESTIMATED,
    provenance.DERIVED,
    provenance.NOT_AVAILABLE,
)

# Shapes several keys share: described once, under the schema file's `$defs`.
FRAME = register(
    Frame,
    Named(
        "frame",
        record(
            Frame,
            "file",
            "line",
            "function",
            "code",
            about={"code": "the line's text, where the capture read it"},
        ),
    ),
)
FRAMES = Array(FRAME)
LIVE_GROUPS = Array(
    register(
        LiveGroup,
        Named(
            "live_group",
            record(LiveGroup, "op", "region", "dtype", "shape", "source", "count", "bytes"),
        ),
    )
)
KIND_BYTES = Named("kind_bytes", record(KindBytes, "kind", "bytes", "how", shapes={"kind": KIND}))
STACKS = Array(Named("stack_bytes", record(StackBytes, "bytes", "buffers", "frames")))

HEAP_BUFFER = Object(
    (
        *fields(HeapBuffer, "bytes", "unpadded_bytes"),
        key("kind", one_of(PARAMETER, OUTPUT, CONSTANT, TEMPORARY), "group"),
        *fields(HeapBuffer, "instruction", "opcode", "shape", "dtype", "dims"),
        key("op", STRING, "op_name"),
        *fields(HeapBuffer, "source", "stack", "logical_buffer_id", "allocation"),
    )
)
HEAP = Named(
    "heap",
    record(
        ProgramHeap,
        "module_id",
        "entry_computation",
        "memory_space",
        "peak_bytes",
        "peak_unpadded_bytes",
        "peak_position",
        "peak_instruction",
        "whole_program_bytes",
        "parameter_bytes",
        "output_bytes",
        "total_allocation_bytes",
        "has_heap_trace",
        "heap_bytes",
        "live_at_peak",
        shapes={"live_at_peak": Array(HEAP_BUFFER)},
    ),
)


def _of_memory(name: str) -> Any:
    """A compiled program's figure from XLA's memory stats (None without them)."""
    return lambda program: None if program.memory is None else getattr(program.memory, name)


PROGRAM = Object(
    (
        key("name", STRING),
        key("program_id", Optional(INT)),
        key("framework_name", Optional(STRING), _of_memory("name")),
        key("devices", Array(STRING), lambda p: () if p.memory is None else p.memory.devices),
        *(key(name, Optional(INT), _of_memory(name)) for name in MEMORY_FIELDS),
        key("compiled_at_ns", Optional(INT), _of_memory("compiled_at_ns")),
        key("unavailable", Optional(STRING), _of_memory("unavailable")),
        key("peak_bytes", INT),
        key("heap", Optional(HEAP)),
        key("hlo_problem", Optional(STRING)),
    )
)


def _compiled(name: str) -> Any:
    """A field of the XLA:TPU compile a program, refusal or candidate came from."""
    return lambda value: getattr(value.compile, name)


# XLA:TPU's figures as its message rounds them, and the message whole.
FIGURE = Optional(record(Figure, "bytes", "rounding_bytes"))
REFUSED = Object(
    (
        key("name", STRING),
        key("program_id", Optional(INT), _compiled("program_id")),
        key("chips", INT, _compiled("partitions")),
        key("needed", FIGURE, lambda r: r.refusal.needed),
        key("available", FIGURE, lambda r: r.refusal.available),
        key("over", FIGURE, lambda r: r.refusal.over),
        key("message", STRING),
        # Its plan on larger chips (not the target's own), where one was made.
        key(
            "diagnostic",
            Optional(Object((key("topology", STRING, "diagnostic"), key("heap", HEAP)))),
            lambda r: None if r.heap is None else r,
        ),
    )
)


def _planned(name: str) -> Any:
    """One of XLA:TPU's memory figures of a compiled program (MEMORY_FIELDS)."""
    return lambda program: program.memory(name)


TPU_PROGRAM = Object(
    (
        key("name", STRING),
        key("program_id", Optional(INT), _compiled("program_id")),
        key("chips", INT, _compiled("partitions")),
        key("need_bytes", INT),
        *(key(name, INT, _planned(name)) for name in MEMORY_FIELDS),
        key("hbm_temp_bytes", INT, "temp_bytes"),
        key("padding_at_peak_bytes", Optional(INT), lambda p: p.padding_bytes if p.heap else None),
        key("compile_seconds", NUMBER, _compiled("seconds")),
        # (fit --sweep: read back from an earlier point's compile)
        key("reused", BOOL, _compiled("reused")),
        key("heap", Optional(HEAP)),
    )
)
TPU_FIT = Object(
    (
        *fields(
            TpuFit,
            "program",
            "running_at_peak",
            "program_bytes",
            "arrays_bytes",
            "arrays_label",
            "need_bytes",
            "usable_bytes",
            "usable_label",
            "fits",
        ),
        key("spare_bytes", INT),
        *fields(TpuFit, "refused", "not_compiled"),
        key(
            "kinds",
            Array(KIND_BYTES),
            about="A chip's need by kind of memory (XLA:TPU's plan, the run's kinds); "
            "the parts add up to need_bytes. Empty where XLA:TPU made no plan of the program.",
        ),
    )
)
CANDIDATE = Object(
    (
        key("program", STRING, _compiled("module")),
        key("change", Optional(STRING), _compiled("change")),
        key("names", Array(STRING), lambda c: c.compile.change_names or ()),
        key("need_bytes", Optional(INT)),
        key("error", Optional(STRING), _compiled("error")),
    )
)
TPU = Object(
    (
        key("topology", STRING),
        key("device_kind", STRING),
        key("compile_seconds", NUMBER, "seconds"),
        key("programs", Array(TPU_PROGRAM)),
        key(
            "failed",
            Array(
                Object(
                    (
                        key("name", STRING, "module"),
                        key("program_id", Optional(INT)),
                        key("error", Optional(STRING)),
                    )
                )
            ),
        ),
        key("refused", Array(REFUSED)),
        key(
            "candidates",
            Array(CANDIDATE),
            about="changes tpumem fit compiled in place of refused programs, each with "
            "XLA:TPU's need per chip (null where it refused the change too)",
        ),
        key("cpu_forms", Array(record(CpuForm, "program", "program_id", "what", "sources"))),
        key("budget", Optional(Object((key("usable_bytes", INT), key("libtpu", STRING))))),
        key("verdict", Optional(STRING), tpu_verdict),
        key("fit", Optional(TPU_FIT)),
    )
)

CHANGE = Object(
    (
        key("key", one_of(*KEYS)),
        *fields(Change, "device", "bytes", "how"),
        key(
            "known",
            KNOWN,
            about="how sure the figure is: XLA's compile of the (changed) program, the run, "
            "the allocator's model, or a rule",
            optional=True,
        ),
        *fields(
            Change,
            "program",
            "line",
            "names",
            "ops",
            "start_bytes",
            "end_bytes",
            "pool_bytes",
            "before_bytes",
            "topology",
            about={
                "names": "donate, bf16: the arguments; pool, headroom: settings; padding: "
                "the shape; batch: the Keras call whose batch_size sets it (fit, evaluate, "
                "predict)",
                "before_bytes": "bf16: the arguments' bytes in f32; padding: the buffers' "
                "bytes with their padding; batch: the activations at the peak",
                "topology": "bf16, padding: the TPU slice",
            },
        ),
        key(
            "kept_in",
            Optional(STRING),
            lambda c: None if c.kept is None else c.kept.name,
            about="growth: the script's container that held what grew when it ended",
            optional=True,
        ),
        key(
            "kept_line",
            Optional(STRING),
            lambda c: None if c.kept is None else c.kept.line,
            about="growth: the first line of the script that adds to that container",
            optional=True,
        ),
        *fields(
            Change,
            "flops",
            "flops_before",
            "accumulate",
            about={
                "accumulate": "batch: the peak is a training step's (an optimizer's state or "
                "gradients at it, outside Keras' evaluate and predict): two half batches "
                "accumulated keep the batch the optimizer sees"
            },
        ),
    )
)

LINES = Object(
    (
        key(
            "lines",
            Array(
                record(
                    LineBytes,
                    "line",
                    "bytes",
                    "buffers",
                    "program",
                    "ops",
                    "unplaced",
                    "at_call",
                    "regions",
                    about={
                        "buffers": "the run's allocations (arrays), or the buffers of XLA's "
                        "plan (a program's temporaries); 0 for the unplaced rest",
                        "program": "the program whose temporaries these are; null: arrays "
                        "the run held",
                        "unplaced": "the program's temporary allocation beyond the buffers "
                        "live at its peak",
                        "at_call": "a program's temporaries XLA's metadata names no line "
                        "for, at the line of the call that ran it",
                        "regions": "the regions the adapter gave the line's arrays, most "
                        "bytes first",
                    },
                )
            ),
            about="Bytes live at the peak by the source line that made them, largest "
            "first; a compiled program's temporaries at the lines XLA's metadata gives them "
            "(the buffers live at the program's own peak in its buffer assignment).",
        ),
        key(
            "programs",
            Array(
                Object(
                    (
                        key("program", STRING, "name"),
                        *fields(OpenedProgram, "call", "temp_bytes", "planned_bytes"),
                        key(
                            "rest_bytes",
                            INT,
                            about="the temp bytes the run recorded beyond the plan's "
                            "buffers at the program's peak (0 where not opened)",
                        ),
                        key(
                            "scale",
                            NUMBER,
                            about="1, or the recorded temp bytes over the plan's, where "
                            "the plan holds more",
                        ),
                        key("opened", BOOL),
                        key(
                            "why",
                            Optional(one_of(NO_PLAN, NO_TEMPORARIES)),
                            lambda p: p.why or None,
                            about="why a program was not opened: no buffer assignment of it "
                            "in the trace, or one with no temporary live at its peak",
                        ),
                    )
                )
            ),
            about="The programs running at the peak and how their temporaries were placed "
            "at lines.",
        ),
    )
)

GROWTH = Object(
    (
        *fields(Growth, "steps", "end_bytes", "warmup_steps", "per_step_bytes", "growing"),
        key(
            "calls_of",
            Optional(STRING),
            about="Where no marks gave the steps: the compiled program whose repeated calls "
            "stood for them.",
            optional=True,
        ),
        key(
            "kept",
            Optional(
                Object(
                    (
                        key("name", STRING),
                        key("container", STRING),
                        key("arrays", INT),
                        key("line", Optional(STRING)),
                    )
                )
            ),
            about="The script's container that held most of what grew when it ended, and the "
            "first line that adds to it; null where none was read.",
            optional=True,
        ),
        key(
            "stacks",
            Array(record(StackGrowth, "per_step_bytes", "start_bytes", "end_bytes", "frames")),
        ),
    ),
    about="Bytes live at the end of each step (a step ends where the next one's mark is); "
    "null with fewer than 4 step ends.",
)

PEAK = Object(
    (
        *fields(
            PeakBreakdown,
            "bytes",
            "time_ns",
            "last_time_ns",
            "step",
            "phase",
            "live_buffers",
            "unattributed_bytes",
            "held_before_capture_bytes",
            "gaps_before_peak",
            "stack_bytes",
            "groups",
            about={
                "phase": "The phase the peak fell in when it is not training (Keras' "
                "evaluate() or predict()); null in training or where nothing marks phases."
            },
        ),
        key(
            "by_region",
            Array(
                Object((key("region", STRING, lambda r: r[0]), key("bytes", INT, lambda r: r[1])))
            ),
        ),
        key(
            "stacks",
            STACKS,
            about="Bytes live at the peak by the Python call stack that made them, largest "
            "first; frames outermost first, empty where no stack was recorded. A compiled "
            "program's temporaries are under the call that ran it, then a frame named after "
            "the program, then the frames XLA kept inside it.",
        ),
    )
)


class _Labelled:
    """A figure's object with the label its device gives it (the peak's)."""

    __slots__ = ("label", "value")

    def __init__(self, value: Any, label: str) -> None:
        self.value, self.label = value, label

    def __getattr__(self, name: str) -> Any:
        return getattr(self.value, name)


def _steps(times: tuple[int, ...]) -> list[int]:
    return [t - before for before, t in zip((0, *times[:-1]), times, strict=True)]


INTS = Array(INT)
GROUP = Object(tuple(key(name, Optional(STRING), item(i)) for i, name in enumerate(GROUP_KEYS)))
MOMENTS = Object(
    (
        key("groups", Array(GROUP)),
        *fields(
            Moments,
            "event_index",
            "time_ns",
            "until_ns",
            "in_use",
            "live_bytes",
            "live_buffers",
            "stack",
            "unattributed",
        ),
        # Per moment, [group, bytes, buffers] of its largest groups, and the rest's.
        key("top", Array(Array(Fixed((INT, INT, INT))))),
        *fields(Moments, "rest_bytes", "rest_buffers", "peak"),
    )
)


def _label(index: int) -> Any:
    """A buffer's label of one of GROUP_KEYS (its op, region, ...)."""
    return lambda buffer: buffer.labels[index]


BUFFER_LIFE = Object(
    (
        *fields(BufferLife, "start_ns", "end_ns", "bytes", "offset", "stack"),
        *(key(name, Optional(STRING), _label(i)) for i, name in enumerate(GROUP_KEYS)),
    )
)
LARGEST = Object(
    (
        key("allocations", INT),
        key("stacks", Array(FRAMES)),
        key("buffers", Array(BUFFER_LIFE)),
    )
)
DETAIL = Object(
    (
        key("stretches", INT),
        # Times, bytes in use, each region's bytes and the pool as steps from the
        # point before (the first from 0): most hold still between two points, so
        # most steps are 0, and a page stays small.
        key("time_step_ns", INTS, lambda d: _steps(d.time_ns)),
        key("in_use_steps", INTS, lambda d: _steps(d.in_use)),
        key("region_steps", Array(INTS), lambda d: [_steps(r) for r in d.regions]),
        key("pool_steps", Optional(INTS), lambda d: None if d.pool is None else _steps(d.pool)),
    )
)
SERIES = Object(
    (
        *fields(
            DeviceSeries,
            "events",
            "time_ns",
            "step_position",
            "in_use",
            "regions",
            "pool",
            "fragmentation",
            "gaps_ns",
            "span_ns",
        ),
        key("detail", Array(DETAIL)),
        key("steps", Array(INTS)),  # (time, step number) of the step marks ticked
        key("moments", Optional(MOMENTS)),
        key("largest", Optional(LARGEST)),
    )
)

DEVICE = Object(
    (
        *fields(DeviceAnalysis, "device", "fidelity", "allocations", "frees", "allocations_per_s"),
        key("peak", PEAK.extended(key("label", LABEL)), lambda d: _Labelled(d.peak, d.peak_label)),
        key(
            "preallocation",
            record(
                Preallocation,
                "pool_peak_bytes",
                "pool_at_peak_bytes",
                "pool_label",
                "pool_source",
                "unused_bytes",
                "limit_bytes",
                "capacity_bytes",
                "settings",
                "smallest_fraction",
            ),
        ),
        key(
            "fragmentation",
            record(
                Fragmentation,
                "label",
                "source",
                "at_peak",
                "maximum",
                "time_of_maximum_ns",
                "check_points",
                "check_max_error",
                "check_schedule",
                "check_unavailable",
            ),
        ),
        key(
            "waste",
            record(
                InternalWaste,
                "label",
                "at_peak_bytes",
                "at_peak_share",
                "total_allocated_bytes",
                "total_requested_bytes",
            ),
        ),
        key(
            "padding",
            record(
                LayoutPadding,
                "label",
                "extra_bytes",
                "row_major_extra_bytes",
                "counted_bytes",
                "uncounted_bytes",
                "included",
                "largest",
                shapes={
                    "largest": Array(
                        record(PaddedShape, "shape", "dtype", "count", "bytes", "extra_bytes")
                    )
                },
            ),
        ),
        *fields(DeviceAnalysis, "headroom_bytes", "headroom_label"),
        key("timeline", record(Timeline, "start_ns", "end_ns", "in_use_max", "fragmentation_max")),
        key(
            "counters",
            record(
                Counters,
                "samples",
                "reported_peak_bytes",
                "sampled_peak_bytes",
                "pool_bytes",
                "limit_bytes",
            ),
        ),
        key("series", Optional(SERIES)),
        key(
            "programs_at_peak",
            Array(
                Object(
                    (
                        key("program", STRING, lambda r: r.program.name),
                        key("program_id", Optional(INT), lambda r: r.program.program_id),
                        key("temp_bytes", INT),
                    )
                )
            ),
        ),
        key("growth", Optional(GROWTH)),
        key("lines", Optional(LINES)),
        key(
            "kinds",
            Optional(Array(KIND_BYTES)),
            lambda d: None if d.kinds is None else d.kinds.kinds,
            about="The peak by kind of memory: the live buffers' bytes by kind, the bytes in "
            "use no buffer seen holds and the runtime's own; together the peak, unless the "
            "live buffers hold more than the bytes in use the allocator counted.",
        ),
    )
)

FIT = Object(
    (
        *fields(
            FitAdvice,
            "device",
            "peak_bytes",
            "headroom_bytes",
            "headroom_label",
            "padding_bytes",
            "padding_label",
        ),
        key(
            "rows",
            Array(
                record(
                    FitRow,
                    "accelerator",
                    "kind",
                    "memory_bytes",
                    "needed_bytes",
                    "fits",
                    "share",
                    "setting",
                    "source",
                    "smallest_capacity_bytes",
                    "compiled_for",
                    "refused_for_vmem",
                    about={
                        "refused_for_vmem": "XLA:TPU refused a kernel's blocks for on-chip "
                        "VMEM: needed_bytes is the budget, the HBM need is not known"
                    },
                    optional=("smallest_capacity_bytes", "compiled_for", "refused_for_vmem"),
                )
            ),
        ),
        key("notes", Array(STRING), lambda fit: [fit_note(note) for note in fit.notes]),
    )
)

OUT_OF_MEMORY = Named(
    "out_of_memory",
    Object(
        (
            key("phase", one_of("run", "compile", KILLED)),
            *fields(
                OutOfMemory,
                "source",
                "message",
                "device",
                "time_ns",
                "step",
                "op",
                "shape",
                "dtype",
                "requested_bytes",
                "in_use_bytes",
                "in_use_label",
                "limit_bytes",
                "free_bytes",
                "largest_free_block_bytes",
            ),
            key("verdict", Optional(one_of(NOT_ENOUGH, FRAGMENTED, COMPILE_VERDICT, LIMIT))),
            *fields(OutOfMemory, "short_by_bytes", "live", "live_bytes"),
            key(
                "compiled_largest",
                Array(record(CompiledAllocation, "bytes", "shape", "op", "source")),
            ),
            key(
                "location",
                Optional(STRING),
                about="the source line that asked, where the trace knows it",
                optional=True,
            ),
            key(
                "causes",
                Array(
                    record(
                        OomCause,
                        "cause",
                        "bytes",
                        "share",
                        "how",
                        "asked_bytes",
                        "given_bytes",
                        "count",
                        "program",
                        "steps",
                        "line",
                        about={
                            "steps": "arrays kept from earlier steps: the first and last step "
                            "they were made in",
                            "line": "arrays kept from earlier steps: the line that made most "
                            "of them",
                        },
                        optional=(
                            "asked_bytes",
                            "given_bytes",
                            "count",
                            "program",
                            "steps",
                            "line",
                        ),
                    )
                ),
                about="where the memory went at the failure, largest first: allocator rounding, "
                "free memory in pieces, a program's temporaries, arrays kept from earlier steps "
                "(each at least 5% of the limit)",
                optional=True,
            ),
        )
    ),
)

CAPACITY = Object(
    (
        *fields(CapacityCheck, "device", "capacity_bytes", "label", "pool_growth"),
        key("failure", Optional(OUT_OF_MEMORY)),
        *fields(
            CapacityCheck,
            "headroom_bytes",
            "tightest_time_ns",
            "tightest_step",
            "smallest_bytes",
            "unplaced_frees",
        ),
    )
)


# What the metadata's records hold, as the schema describes them.
_METADATA_ABOUT = {
    "process": "which process of a distributed run this was, and who said so",
    "memory_settings": "how the framework's allocator is set, as its adapter declared it "
    "(tpumem/trace/memory_settings.py); left out where the framework's name says as much",
    "words": "how the framework's users write what the advice asks of them, as its adapter "
    "declared them (tpumem/trace/framework_words.py); left out where the framework's name "
    "says as much",
}
_SETTINGS_ABOUT = {
    "defragment_setting": "the setting, as written (NAME=value), that keeps the allocator's "
    "free memory from fragmenting",
    "allocator_model": "the model of the allocator that replays the run's events where its "
    'own counters are not in the trace ("cuda caching allocator": PyTorch\'s)',
    "donation": "how a compiled call is told to reuse its arguments' memory for its outputs, "
    'where the framework lets its users say it ("donate_argnums")',
}


def _described(shape: Object, about: dict[str, str]) -> Object:
    """The object with these keys described."""
    return dataclasses.replace(
        shape,
        keys=tuple(dataclasses.replace(k, about=about.get(k.name, k.about)) for k in shape.keys),
    )


def _metadata_shape() -> Shape:
    """The trace's metadata as the trace writes it (its own `to_json`): its fields,
    and beside them each adapter's own (EXTRAS)."""
    described = encoded_record(
        TraceMetadata, required=("framework", "backend", "source", "warnings")
    )
    mine = []
    for k in described.keys:
        if k.name == "memory_settings" and isinstance(k.shape, Object):
            k = dataclasses.replace(k, shape=_described(k.shape, _SETTINGS_ABOUT))
        if k.name != "extra":
            mine.append(k)
    extra: dict[str, list[Shape]] = {}
    for cls in EXTRAS.values():
        for k in encoded_record(cls).keys:
            extra.setdefault(k.name, []).append(k.shape)
    for name, shapes in extra.items():
        shape = shapes[0] if len(shapes) == 1 else AnyOf(tuple(shapes))
        mine.append(key(name, shape, optional=True))
    whole = dataclasses.replace(
        described,
        keys=tuple(mine),
        about="the trace's metadata (tpumem/trace/metadata.py: TraceMetadata and, beside its "
        "fields, the adapter's own); fields tpumem does not know are kept as the trace has them",
    )
    return Written(_described(whole, _METADATA_ABOUT), TraceMetadata.to_json)


REPORT = Object(
    (
        key("schema", Const(SCHEMA), lambda _: SCHEMA),
        key("path", Optional(STRING)),
        *fields(TraceAnalysis, "framework", "backend", "source", "complete"),
        key("metadata", _metadata_shape()),
        key("duration_ns", INT),
        key("devices", Array(DEVICE)),
        *fields(TraceAnalysis, "total_peak_bytes", "total_peak_time_ns", "warnings"),
        key("programs", Array(PROGRAM), "compiled"),
        key("fit", Optional(FIT)),
        key("steps", INT),
        key(
            "out_of_memory",
            Array(OUT_OF_MEMORY),
            about="each allocation that failed for want of memory, the one that ended the run last",
            optional=True,
        ),
        key(
            "capacity",
            Array(CAPACITY),
            about="per device, the run replayed through the BFC allocator model capped at "
            "the capacity asked about (--capacity); modeled",
            optional=True,
        ),
        key("tpu", Array(TPU), optional=True),
        key(
            "changes",
            Array(CHANGE),
            about="What to change, each with the figure the run gives for it.",
        ),
    ),
    title="tpumem report",
)
PROGRAM_REPORT = Object(
    (key("schema", Const(PROGRAM_SCHEMA), lambda _: PROGRAM_SCHEMA), *PROGRAM.keys),
    title="tpumem program",
)


def report_dict(analysis: TraceAnalysis) -> dict[str, Any]:
    return REPORT.write(analysis)


def live_groups_json(groups: tuple[LiveGroup, ...]) -> list[dict[str, Any]]:
    return LIVE_GROUPS.write(groups)


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
    analysis: TraceAnalysis | None = None,
) -> str:
    """One program in full: `tpumem report --program NAME -f json`."""
    return dump(PROGRAM_REPORT.write(program), indent=2) + "\n"


def render_json(analysis: TraceAnalysis, *, width: int = 100, color: bool = False) -> str:
    """(Width and color are the terminal's: JSON has neither.)"""
    return dump(report_dict(analysis), indent=2) + "\n"
