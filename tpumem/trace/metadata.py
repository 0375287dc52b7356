"""What a trace says about its run: the typed metadata.

On the file the metadata is JSON: the stream's header, then `meta` rows, each a patch
that replaces the keys it names (`warnings` accumulate). The runner writes the header,
the adapters add what they learn as the run goes, the runner how it ended, the
launcher how a run it saw die ended, the importer a profile's whole metadata at once.
A reader merges the patches and reads the result as `TraceMetadata` (records.py checks
every field against its type). Every writer names the fields it sets, typed, through
`metadata_json`: a name that is not a field here is a mistake, and fails.

Versioning: the metadata is part of the trace format (schema.FORMAT_VERSION). A field
may be added within a version (older readers keep it in `other`, and show it as they
found it); renaming or removing a field, or changing its type, is a new version.

Fields are None where the run did not record them: a reader says "not recorded",
never a default that looks measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tpumem.trace.framework_words import WORDS_ADDED_SINCE, WORDS_BEFORE_WRITTEN, FrameworkWords
from tpumem.trace.memory_settings import DECLARED_BEFORE_WRITTEN, MemorySettings, declared_since
from tpumem.trace.records import OTHER, decode_record, encode, filled_since, hints

# Environment variables that decide how much a framework reserves up front: a
# profiled run's metadata records those set (`env`), and those its framework's
# memory_settings name (run_header.py).
# Whose allocator each of the variables tpumem records sets: a report names a
# run's own framework's alone (a notebook's kernel holds every variable its
# environment had).
SETTINGS_OF = {
    "jax": (
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "XLA_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "XLA_PYTHON_CLIENT_ALLOCATOR",
    ),
    "tensorflow": (
        "TF_FORCE_GPU_ALLOW_GROWTH",
        "TF_CPU_ALLOCATOR_USE_BFC",
        "TF_CPU_BFC_MEM_LIMIT_IN_MB",
        "TF_GPU_ALLOCATOR",
        "TF_GPU_HOST_MEM_LIMIT_IN_MB",
    ),
    "torch_xla": ("PJRT_ALLOCATOR_PREALLOCATE", "PJRT_ALLOCATOR_FRACTION"),
}
# Recorded too: the device PyTorch/XLA runs on, which is no allocator's setting.
SETTINGS_VARIABLES = (*(name for names in SETTINGS_OF.values() for name in names), "PJRT_DEVICE")


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    name: str = "?"
    kind: str | None = None  # the framework's word for it ("cpu", "NVIDIA H100 80GB HBM3")
    capacity_bytes: int | None = None
    platform: str | None = None  # JAX's


@dataclass(frozen=True, slots=True)
class ExitStatus:
    """How the run ended: an exit code, or the signal that ended it."""

    code: int | None = None
    signal: int | None = None
    signal_name: str | None = None
    exception: str | None = None  # "KeyboardInterrupt", or the uncaught error
    # For a process killed by a signal (tpumem profile records these): its peak
    # resident memory, what the machine (or its control group) allows, and how
    # many processes the control group's OOM killer killed during the run.
    max_rss_bytes: int | None = None
    memory_limit_bytes: int | None = None
    oom_kills: int | None = None


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """Which process of a distributed run this one was: its index among the run's
    processes (JAX's process_index, TensorFlow's task, a launcher's RANK), how many
    there were, and who said so."""

    index: int | None = None
    count: int | None = None
    source: str | None = None  # "jax.process_index()", "TF_CONFIG", "RANK", ...


@dataclass(frozen=True, slots=True)
class CaptureSummary:
    """The back-to-back profiler sessions that captured allocator events (TensorFlow;
    JAX on a GPU): how many, and what fell between them."""

    method: str | None = None
    chunk_s: float | None = None  # each session's length
    chunks: int | None = None
    events: int | None = None
    gaps: int | None = None
    gap_total_ns: int | None = None
    gap_max_ns: int | None = None
    covered_ns: int | None = None
    covered_fraction: float | None = None
    longest_session_ns: int | None = None
    sessions_overrun: int | None = None  # sessions that ran well past their length
    # CPU seconds of the process that read the sessions into the trace, outside the
    # profiled one (None: they were read in the profiled process).
    reader_cpu_s: float | None = None


# The source of a trace `tpumem import` wrote: its clock is the profiler's own.
IMPORTED = "import"
# A script compiled for TPU slices by `tpumem fit`, never run: no allocation,
# no duration, no ending of its own.
COMPILED_ONLY = "tpumem fit"
# The source of a trace `tpumem.track` wrote: a block of a process that went on.
TRACKED = "tpumem.track"


@dataclass(frozen=True, slots=True)
class JaxBook:
    """The JAX adapter's book of the buffers jax.Arrays hold (CPU and TPU)."""

    method: str | None = None
    arrays_entered: int | None = None  # by the hooks, as they were made
    arrays_found_by_poll: int | None = None
    arrays_sharing_a_buffer: int | None = None
    arrays_donated: int | None = None
    arrays_deleted: int | None = None
    shard_arrays_listed: int | None = None  # per-device arrays JAX keeps
    # Those left out of jax.live_arrays() while tpumem recorded (the script's count
    # of its arrays unchanged); None in traces made before they were.
    shard_arrays_hidden: bool | None = None
    poll_interval_s: float | None = None
    jitted_functions_wrapped: int | None = None
    program_temp_shown: bool | None = None  # programs' temps live while they ran


@dataclass(frozen=True, slots=True)
class TorchXlaBook:
    """The PyTorch/XLA adapter's book of materialized tensors' buffers."""

    method: str | None = None
    tensors_seen: int | None = None
    tensors_transferred: int | None = None
    tensors_materialized_by_graphs: int | None = None
    buffers_replaced_in_place: int | None = None
    gradients_found: int | None = None
    freed_after_their_graph: int | None = None
    executions_observed: int | None = None
    executions_not_observed: int | None = None  # seen only in PyTorch/XLA's log
    syncs: int | None = None
    steps: int | None = None
    steps_from: str | None = None
    program_temp_shown: bool | None = None
    # Under SPMD: the devices of the mesh, each holding its shard of every tensor;
    # the book records device 0's (shard_bytes.py), and how many tensors it
    # entered by their sharding.
    spmd_devices: int | None = None
    sharded_tensors: int | None = None


@dataclass(frozen=True, slots=True)
class AllocatorLog:
    """What an allocator logged when an allocation failed (TensorFlow's and XLA's
    BFC allocator print their state to stderr), as `tpumem profile` read it."""

    wall_time_ns: int | None = None  # when it was read (the trace's clock + start_time_ns)
    text: str = ""  # its first line, the pool line and the stats
    # Summed from its dump of every chunk, where it printed one: exact bytes.
    chunks_in_use_bytes: int | None = None
    largest_free_chunk_bytes: int | None = None
    # How many lines the log had (on a terminal `tpumem profile` shows the first).
    lines: int | None = None


@dataclass(frozen=True, slots=True)
class AllocatorOom:
    """An allocation the allocator failed, as its own history recorded it (a
    PyTorch snapshot's `oom` entry), on the trace clock."""

    device: str = ""
    time_ns: int | None = None
    requested_bytes: int | None = None  # the size asked for
    device_free_bytes: int | None = None  # what CUDA said was free on the device
    pool_bytes: int | None = None  # what the allocator held from the device then
    stack: int | None = None  # the call stack that asked (a stack row's id)


@dataclass(frozen=True, slots=True)
class KeptArrays:
    """A container of the script's that held device arrays when it ended
    (adapters/kept_arrays.py): what a leak's arrays are kept in."""

    name: str = ""  # as the script writes it: history, metrics['loss'], trainer.outputs
    container: str = ""  # its type: list, dict, deque
    arrays: int = 0
    buffer_ids: tuple[int, ...] = ()  # the arrays' buffers, as the trace's rows name them
    line: str | None = None  # path:line of the first statement that adds to it


# What only one adapter records, one class per adapter. On the file their fields
# stand beside the common ones (the format's keys since version 1).
@dataclass(frozen=True, slots=True)
class JaxExtra:
    buffer_book: JaxBook | None = None  # none on a GPU, where allocator events stand


@dataclass(frozen=True, slots=True)
class TorchXlaExtra:
    torch_version: str | None = None
    buffer_book: TorchXlaBook | None = None


# The TensorFlow adapter records nothing beyond the common fields.
EXTRAS: dict[str, type] = {"jax": JaxExtra, "torch_xla": TorchXlaExtra}
EXTRA = "extra"


@dataclass(frozen=True, slots=True)
class TraceMetadata:
    """What a trace says about its run, merged from its header and patches."""

    format: str | None = None
    format_version: int | None = None
    framework: str = "unknown"
    framework_version: str | None = None
    backend: str = "unknown"  # "cpu", "gpu", "tpu"
    source: str = "unknown"  # "tpumem profile", or "import" for a profile read in
    # A profiled run: what ran, where, and what tpumem set for it.
    command: tuple[str, ...] | None = None
    cwd: str | None = None
    host: str | None = None
    pid: int | None = None
    python: str | None = None
    tpumem_version: str | None = None
    capture_options: Mapping[str, float | bool] | None = None  # CaptureOptions
    set_by_tpumem: Mapping[str, str] | None = None
    env: Mapping[str, str] | None = None  # SETTINGS_VARIABLES as the run had them
    # An imported profile: where from. `run`: the id all traces of one run share
    # (a multi-host profile's run; a distributed run's, from tpumem or its launcher).
    imported_from: str | None = None
    run: str | None = None
    process: ProcessInfo | None = None  # which process of a distributed run
    xspace_planes: tuple[str, ...] | None = None
    # The clock: a profiled run's trace times count from start_time_ns (wall clock).
    start_time_ns: int | None = None
    end_time_ns: int | None = None
    exit: ExitStatus | None = None
    recorded_by: str | None = None  # who recorded the exit, when not the runner
    # Allocation failures the allocator logged, as `tpumem profile` read them.
    allocator_oom_logs: tuple[AllocatorLog, ...] | None = None
    # Allocation failures the allocator's own history holds (imported snapshots).
    allocator_ooms: tuple[AllocatorOom, ...] | None = None
    devices: tuple[DeviceInfo, ...] | None = None
    fidelity: Mapping[str, str] | None = None  # per device: allocator, buffer, counter
    allocator_settings: Mapping[str, str | int | float | None] | None = None
    # How the framework's allocator is set, as its adapter declared it (read from
    # DECLARED_BEFORE_WRITTEN by the framework's name where the trace lacks it).
    memory_settings: MemorySettings | None = None
    # How its users write what the advice asks of them, as its adapter declared it.
    words: FrameworkWords | None = None
    capture: CaptureSummary | None = None
    not_exposed: tuple[str, ...] | None = None  # what the backend does not tell
    kept: tuple[KeptArrays, ...] | None = None  # containers holding arrays at the end
    warnings: tuple[str, ...] = ()
    extra: JaxExtra | TorchXlaExtra | None = None  # by framework (EXTRAS)
    other: Mapping[str, Any] = field(default_factory=dict)  # fields tpumem does not know

    @classmethod
    def from_json(cls, value: Mapping[str, Any], dropped: list[str]) -> TraceMetadata:
        """The metadata from its merged JSON; `dropped` names the fields left out."""
        extra_class = EXTRAS.get(str(value.get("framework")))
        extra_names = set(hints(extra_class)) if extra_class else set()
        own = {k: v for k, v in value.items() if k not in extra_names and k != EXTRA}
        metadata: TraceMetadata = decode_record(cls, own, "", dropped)
        written = value.get("memory_settings")
        settings = declared_since(
            metadata.framework,
            metadata.memory_settings,
            written.keys() if isinstance(written, Mapping) else (),
        )
        if settings != metadata.memory_settings:
            metadata = dataclasses.replace(metadata, memory_settings=settings)
        written_words = value.get("words")
        words = filled_since(
            WORDS_BEFORE_WRITTEN.get(metadata.framework),
            metadata.words,
            written_words.keys() if isinstance(written_words, Mapping) else (),
            WORDS_ADDED_SINCE,
        )
        if words != metadata.words:
            metadata = dataclasses.replace(metadata, words=words)
        if extra_class is None:
            return metadata
        mine = {k: v for k, v in value.items() if k in extra_names}
        return dataclasses.replace(metadata, extra=decode_record(extra_class, mine, "", dropped))

    def to_json(self) -> dict[str, Any]:
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        # Settings that say no more than the framework's name are left out, as None
        # is: the reader fills them in again (and a report of a trace written
        # before them reads as it did).
        if self.memory_settings == DECLARED_BEFORE_WRITTEN.get(self.framework):
            fields["memory_settings"] = None
        if self.words == WORDS_BEFORE_WRITTEN.get(self.framework):
            fields["words"] = None
        return metadata_json(fields)

    def with_warnings(self, *more: str) -> TraceMetadata:
        return dataclasses.replace(self, warnings=(*self.warnings, *more))

    def capacity_of(self, device: str) -> int | None:
        for entry in self.devices or ():
            if entry.name == device and entry.capacity_bytes:
                return entry.capacity_bytes
        return None


_FIELDS = frozenset(hints(TraceMetadata))


def metadata_json(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Metadata fields, named as TraceMetadata names them, as the file's JSON: an
    adapter's `extra` stands beside the common fields, `other` fields beside them
    too. A name that is not a field is a mistake in tpumem, and raises."""
    unknown = set(fields) - _FIELDS
    if unknown:
        raise TypeError(f"not fields of the trace's metadata: {', '.join(sorted(unknown))}")
    body = {
        name: encode(value)
        for name, value in fields.items()
        if value is not None and name not in (EXTRA, OTHER)
    }
    extra = fields.get(EXTRA)
    return {**fields.get(OTHER, {}), **body, **(encode(extra) if extra is not None else {})}
