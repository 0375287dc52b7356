"""What kind of memory the peak is: parameters, gradients, optimizer state,
activations and temporaries, inputs, other state, the framework's overhead, and
what no one says, each with how it was told. The parts add up to the peak.

Where each kind comes from (docs/figures.md, "What the peak is"):
- the regions adapters give from the frameworks' own objects, at allocation or
  later (TOLD rows): PyTorch/XLA's book (a torch.nn.Parameter, its .grad, a
  torch.optim optimizer's state, host data), the JAX book (the objects in each
  jitted step's pytrees), TensorFlow's variables read where their buffers are,
  a PyTorch snapshot's categories;
- a compiled program running at the peak: its temporaries (XLA's plan), and
  its arguments no object told, matched to the run's live arrays by dtype and
  size after the told ones: state where an output of the program replaces
  them, else inputs (no words of names decide a kind here);
- the ops' outputs made since the step under way began: its activations;
- the allocator's bytes beyond those asked for, and a TPU program's stack: the
  framework's overhead; the bytes in use that no buffer seen holds (made
  before the capture, or in its gaps), less what variables read on both sides
  of the peak account for.
What is left is the run's other arrays, which the framework does not say the use of.
"""

from __future__ import annotations

import bisect
import collections
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from tpumem.analysis.by_line import ProgramsAtPeak
from tpumem.analysis.compiled.program_heap import OUTPUT, PARAMETER, HeapBuffer
from tpumem.analysis.compiled.programs import CompiledProgram, ProgramKinds
from tpumem.analysis.device_events import DeviceEvents, step_marks
from tpumem.analysis.peak import PeakBreakdown
from tpumem.hlo.shapes import numpy_dtype
from tpumem.trace.model import Trace
from tpumem.trace.schema import BEFORE_TRACE, KERAS_STEP, MARK, TOLD

# Stable keys (the JSON's); their words are the report's (report/answer_rows.py).
PARAMETERS = "parameters"
GRADIENTS = "gradients"
OPTIMIZER = "optimizer_state"
ACTIVATIONS = "activations"
INPUTS = "inputs"
STATE = "other_state"
OVERHEAD = "overhead"
OTHER = "not_told"
UNATTRIBUTED = "unattributed"
KINDS = (
    PARAMETERS,
    GRADIENTS,
    OPTIMIZER,
    ACTIVATIONS,
    INPUTS,
    STATE,
    OVERHEAD,
    OTHER,
    UNATTRIBUTED,
)

# How each kind was told.
BY_ADAPTER = "the framework's own objects"
# Regions told otherwise than by the framework's objects: how, by region.
_REGION_HOW = {"workspace": "modeled: cuBLAS's workspace, one per thread that multiplies"}
BY_PLAN = "XLA's plan of the program running"
BY_TEMP_SIZE = "the program's temp size, as the run recorded it"
BY_OUTPUTS = "the program's outputs (its plan), allocated with its launch"
BY_STEP = "ops' outputs made since the step began, held by no variable"
BY_SUPERSEDED = "a variable's earlier value, still held by the step beside its new one"
BY_GAP = "read where a variable's buffer was; the capture missed its allocation (a gap)"
BY_SIZE = "a variable TensorFlow copies on read (a sparse op read it), matched by its size"
BY_FATE = "XLA's plan: given back by the program (state) or not (an input)"
BY_KERAS = "Keras' trainer's state layout"
BY_COUNTERS = "in use, in no buffer seen"
BY_RUNTIME = "the runtime's own reservation (a program's stack)"
BY_ROUNDING = "the allocator's rounding: bytes handed out beyond those asked for"
NOT_TOLD = "not told by the framework"
BY_BEFORE = (
    "made before the profile's first entry (no category or op is known of them): "
    "start recording before the model and its optimizer are built"
)

# The regions adapters give (adapters/book_rows.py) that tell a kind.
_REGIONS = {
    "parameter": PARAMETERS,
    "gradient": GRADIENTS,
    "optimizer state": OPTIMIZER,
    "input": INPUTS,
    "state": STATE,
    "temp": ACTIVATIONS,  # (a program's working memory, or an op's own: TensorFlow)
    # A PyTorch memory snapshot's categories (torch.profiler's), where it has them.
    "optimizer_state": OPTIMIZER,
    "activation": ACTIVATIONS,
    "temporary": ACTIVATIONS,
    "autograd_detail": ACTIVATIONS,
    # cuBLAS's workspace on CUDA (a PyTorch fit on fake tensors models it).
    "workspace": OVERHEAD,
}


def region_kind(region: str) -> str | None:
    """The kind an adapter's region names, None for a region of no kind."""
    return _REGIONS.get(region)


# The regions a told row gives: a buffer of any other region is its own still.
_TOLD_REGIONS = frozenset(_REGIONS) - {"temp"}
# Told by size alone (_by_size): the region's name after this prefix.
SIZED = "sized:"
# A variable's earlier buffer, live beside its newer one (_by_address).
SUPERSEDED = "superseded:"  # and the variable's region
OP_OUTPUT = "output"  # the region of an op's or a program's result (adapters/book_rows.py)


@dataclass(frozen=True, slots=True)
class KindBytes:
    kind: str
    bytes: int
    how: tuple[str, ...]  # how it was told (the BY_ texts above)
    parts: tuple[int, ...] = ()  # the bytes told each way, in `how`'s order

    def told(self, how: str) -> int:
        """The bytes told one way (`how`: a BY_ text)."""
        return dict(zip(self.how, self.parts, strict=False)).get(how, 0)


class Ledger:
    """Bytes by kind, each with how it was told, in the order told."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = {}
        self.hows: dict[str, dict[str, int]] = {}  # kind -> how -> bytes told so

    def add(self, kind: str, size: int, how: str) -> None:
        if size:
            self.totals[kind] = self.totals.get(kind, 0) + size
            told = self.hows.setdefault(kind, {})
            told[how] = told.get(how, 0) + size

    def kinds(self) -> tuple[KindBytes, ...]:
        """In KINDS' order, those with bytes."""
        return tuple(
            KindBytes(k, self.totals[k], tuple(self.hows[k]), tuple(self.hows[k].values()))
            for k in KINDS
            if self.totals.get(k)
        )


@dataclass(frozen=True, slots=True)
class PeakKinds:
    kinds: tuple[KindBytes, ...]  # in KINDS' order, those with bytes
    # Of each program running at the peak, in ProgramsAtPeak.found's order.
    programs: tuple[ProgramKinds, ...] = ()


# Keras 3's JAX trainer: `state[k]` of its train step is, by k, its trainable,
# non-trainable, optimizer and metrics variables; `data` its batch.
_KERAS_STATE = re.compile(r"^state\[(\d)\]")
_KERAS_KINDS = {"0": PARAMETERS, "1": STATE, "2": OPTIMIZER, "3": STATE}


def keras_state_kind(name: str) -> str | None:
    """The kind Keras' trainer's layout gives an argument of its train step."""
    index = _KERAS_STATE.match(name)
    return _KERAS_KINDS.get(index[1]) if index is not None else None


def peak_kinds(
    trace: Trace,
    events: DeviceEvents,
    live: np.ndarray,
    running: ProgramsAtPeak,
    peak: PeakBreakdown,
) -> PeakKinds:
    ledger = Ledger()
    add = ledger.add
    kind_of = np.full(len(live), "", object)
    told = _told_rows(trace, events.device)
    if len(live):
        # Each kind counts the bytes asked for; what the allocator handed out
        # beyond them (a BFC chunk it did not split, a TPU layout's padding) is
        # its overhead.
        handed = events.bytes[live]
        asked = events.requested[live]
        sizes = np.where((asked >= 0) & (asked <= handed), asked, handed)
        add(OVERHEAD, int((handed - sizes).sum()), BY_ROUNDING)
        region_of = _regions(trace, events, live, sizes, peak.time_ns, told)
        program_of = running.program_of
        told_here = np.isin(region_of, list(_TOLD_REGIONS))
        for index, program in enumerate(running.found):
            mine = program_of == index
            # A launch's output a reading found a variable's new value in is of
            # the variable's kind (told below); the rest are the plan's.
            kind_of[mine & ~told_here] = ACTIVATIONS
            held = int(sizes[mine].sum())
            outputs = _launched_outputs(program, held)
            found = int(sizes[mine & told_here].sum())
            planned = program.heap is not None and program.heap.temp_peak_bytes > 0
            add(ACTIVATIONS, held - max(outputs, found), BY_PLAN if planned else BY_TEMP_SIZE)
            add(STATE, max(0, outputs - found), BY_OUTPUTS)
        superseded = np.array([r.startswith(SUPERSEDED) for r in region_of.tolist()], bool)
        kind_of[superseded] = ACTIVATIONS
        add(ACTIVATIONS, int(sizes[superseded].sum()), BY_SUPERSEDED)
        for name, kind in _REGIONS.items():
            mine = (region_of == name) & (kind_of == "")
            kind_of[mine] = kind
            add(kind, int(sizes[mine].sum()), _REGION_HOW.get(name, BY_ADAPTER))
            mine = (region_of == SIZED + name) & (kind_of == "")
            kind_of[mine] = kind
            add(kind, int(sizes[mine].sum()), BY_SIZE)
        keras = bool(running.found) and trained_by_keras(trace)
        keys = _live_keys(trace, events, live)
        for program in running.found:
            for position, kind, how in _matched(keys, kind_of, program, keras):
                kind_of[position] = kind
                add(kind, int(sizes[position]), how)
        # What the ops of the step under way made, that no object holds: the
        # step's activations and temporaries (an op's output, live until its
        # last reader has run).
        start = _step_start(trace, peak.time_ns)
        if start is not None:
            made_in_step = (kind_of == "") & (region_of == OP_OUTPUT)
            made_in_step &= events.time_ns[live] >= start
            kind_of[made_in_step] = ACTIVATIONS
            add(ACTIVATIONS, int(sizes[made_in_step].sum()), BY_STEP)
        # An imported profile's allocations from before its first entry: the
        # profiler saw them made by no op (torch.profiler gives them no category).
        before = (kind_of == "") & (region_of == BEFORE_TRACE)
        kind_of[before] = OTHER
        add(OTHER, int(sizes[before].sum()), BY_BEFORE)
        add(OTHER, int(sizes[kind_of == ""].sum()), NOT_TOLD)
        # A program's arguments are the variables' values as it began: an
        # earlier value of a variable the step has since replaced is still of
        # the variable's kind there.
        as_argument = kind_of.copy()
        for position in np.flatnonzero(superseded).tolist():
            variable = _REGIONS.get(region_of[position][len(SUPERSEDED) :])
            if variable is not None:
                as_argument[position] = variable
        variables = told.variables() if told is not None else {}
        arguments = tuple(
            _program_kinds(keys, as_argument, program_of == index, p, variables)
            for index, p in enumerate(running.found)
        )
    else:
        arguments = tuple(ProgramKinds() for _ in running.found)
    unseen = peak.unattributed_bytes
    if unseen and len(live) and told is not None:
        for kind, size in _held_unseen(events, live, peak.time_ns, unseen, told).items():
            add(kind, size, BY_GAP)
            unseen -= size
    add(UNATTRIBUTED, unseen, BY_COUNTERS)
    add(OVERHEAD, peak.stack_bytes, BY_RUNTIME)
    return PeakKinds(ledger.kinds(), arguments)


def _step_start(trace: Trace, time_ns: int) -> int | None:
    """When the step under way at `time_ns` began: its mark's time."""
    times, _ = step_marks(trace)
    index = int(np.searchsorted(times, time_ns, side="right")) - 1
    return int(times[index]) if index >= 0 else None


@dataclass(frozen=True, slots=True)
class _Told:
    """A device's TOLD rows, read once. A row names its buffer by id (the JAX
    book's), or by address (TensorFlow's variables, read where their buffers
    are: `key` names the variable), or by size alone (a variable TensorFlow
    copies on read: no address, its key)."""

    times: np.ndarray
    ids: np.ndarray  # -1: none
    addresses: np.ndarray  # -1: none
    sizes: np.ndarray
    regions: list[str]
    keys: list[str]  # "" where the row names no variable
    dtypes: list[str]  # the variable's ("" where the row has none)
    ops: list[str]  # the op whose outputs the row tells ("" where none)

    def variables(self) -> dict[tuple[str, int], list[str]]:
        """The kinds of the variables the rows name, one each, by (dtype, size),
        in the order they were first told."""
        last: dict[str, tuple[str, int, str]] = {}
        for key, dtype, size, region in zip(
            self.keys, self.dtypes, self.sizes.tolist(), self.regions, strict=True
        ):
            if key and dtype and region in _REGIONS:
                last[key] = (dtype, size, _REGIONS[region])
        found: dict[tuple[str, int], list[str]] = {}
        for dtype, size, kind in last.values():
            found.setdefault((dtype, size), []).append(kind)
        return found

    @property
    def copied(self) -> set[str]:
        """The variables told by their size after all: their readings found
        copies (TensorFlow copied them on each read), not their buffers."""
        return {
            k
            for k, a, i in zip(self.keys, self.addresses.tolist(), self.ids.tolist(), strict=True)
            if k and a <= 0 and i < 0
        }

    def rows(self, chosen: np.ndarray) -> tuple[Any, ...]:
        """(addresses, times, sizes, regions, keys) of the chosen rows."""
        kept = chosen.tolist()
        return (
            self.addresses[chosen],
            self.times[chosen],
            self.sizes[chosen],
            [r for r, k in zip(self.regions, kept, strict=True) if k],
            [k for k, c in zip(self.keys, kept, strict=True) if c],
        )


def _told_rows(trace: Trace, device: str) -> _Told | None:
    told = np.flatnonzero(trace.is_kind(TOLD))
    if not len(told):
        return None
    device_codes, devices = trace.codes_at("device", told)
    told = told[device_codes == (devices.index(device) if device in devices else -2)]
    if not len(told):
        return None
    codes, values = trace.codes_at("region", told)
    dtype_codes, dtype_values = trace.codes_at("dtype", told)
    op_codes, op_values = trace.codes_at("op", told)
    return _Told(
        times=trace.numbers_at("time_ns", told, -1),
        ids=trace.numbers_at("buffer_id", told, -1),
        addresses=trace.numbers_at("address", told, -1),
        sizes=trace.numbers_at("bytes", told, -1),
        regions=[values[c] if c >= 0 else "" for c in codes.tolist()],
        keys=[k if isinstance(k, str) else "" for k in trace.texts_at(told)],
        dtypes=[dtype_values[c] if c >= 0 else "" for c in dtype_codes.tolist()],
        ops=[op_values[c] if c >= 0 else "" for c in op_codes.tolist()],
    )


def _regions(
    trace: Trace,
    events: DeviceEvents,
    live: np.ndarray,
    asked: np.ndarray,
    at: int,
    told: _Told | None,
) -> Any:
    """The region of each live buffer (`asked`: the bytes each asked for): what
    a TOLD row of the device says of it, else its allocation's own."""
    codes, values = trace.codes_at("region", events.row[live])
    names = np.array([*values, ""], object)[codes]  # (-1, no region: "")
    if told is None:
        return names
    by_id = {b: r for b, r in zip(told.ids.tolist(), told.regions, strict=True) if b >= 0 and r}
    for position, buffer in enumerate(events.buffer_id[live].tolist()):
        region = by_id.get(buffer)
        if region:
            names[position] = region
    addressed = (told.ids < 0) & (told.addresses > 0)
    copied = told.copied
    if copied:
        addressed &= np.array([k not in copied for k in told.keys], bool)
    if addressed.any():
        _by_address(events, live, names, asked, at, told.rows(addressed))
    by_op = {op: r for op, r in zip(told.ops, told.regions, strict=True) if op and r}
    if by_op:
        _by_op(trace, events, live, names, by_op)
    sized = (told.ids < 0) & (told.addresses <= 0) & np.array([not op for op in told.ops], bool)
    if sized.any():
        _, _, sizes, regions, _ = told.rows(sized)
        _by_size(events, live, names, asked, sizes, regions)
    return names


def _by_op(
    trace: Trace,
    events: DeviceEvents,
    live: np.ndarray,
    names: np.ndarray,
    by_op: dict[str, str],
) -> None:
    """The region TOLD rows give the outputs of named ops (a tape's gradients
    traced into a tf.function): a live op output made by one, its name inside
    the function whatever calls it (`StatefulPartitionedCall/<op>`)."""
    codes, values = trace.codes_at("op", events.row[live])
    regions = [
        next((by_op[s] for s in _suffixes(value) if s in by_op), "")
        if isinstance(value, str)
        else ""
        for value in values
    ]
    found = np.array([*regions, ""], object)[codes]
    mine = (found != "") & (names == OP_OUTPUT)
    names[mine] = found[mine]


def _suffixes(name: str) -> list[str]:
    """An op's name without each of its leading scopes, longest first."""
    parts = name.split("/")
    return ["/".join(parts[i:]) for i in range(len(parts))]


def _held_unseen(
    events: DeviceEvents, live: np.ndarray, at: int, unseen: int, told: _Told
) -> dict[str, int]:
    """Of the bytes in use that no buffer seen holds, those of variables read at
    the same address just before and just after `at` (the peak), where no live
    buffer seen is: the buffer their readings found was allocated in a gap of
    the capture. By kind, at most `unseen` bytes in all."""
    copied = told.copied
    before: dict[str, tuple[int, int, int, str]] = {}  # key -> (time, address, size, region)
    after: dict[str, int] = {}  # key -> the address of its first reading after
    for index in np.argsort(told.times, kind="stable").tolist():
        key = told.keys[index]
        if not key or key in copied:
            continue
        time_ns, address = int(told.times[index]), int(told.addresses[index])
        if time_ns <= at:
            before[key] = (time_ns, address, int(told.sizes[index]), told.regions[index])
        elif key not in after:
            after[key] = address
    seen = set(events.address[live].tolist())
    allocations = events.time_ns[events.is_alloc]
    allocated_at = events.address[events.is_alloc]
    # (An address outside all the allocator handed out is not its memory: a
    # scalar TensorFlow keeps elsewhere.)
    low = int(allocated_at.min()) if len(allocated_at) else 0
    high = int((allocated_at + events.bytes[events.is_alloc]).max()) if len(allocated_at) else 0
    found: dict[str, int] = {}
    left = unseen
    for key, (time_ns, address, size, region) in before.items():
        if address in seen or not low <= address < high or after.get(key, address) != address:
            continue
        # Nothing seen allocated there between the reading and the peak.
        there = allocated_at == address
        if ((allocations > time_ns) & (allocations <= at) & there).any():
            continue
        kind = _REGIONS.get(region)
        if kind is None or size > left:
            continue
        found[kind] = found.get(kind, 0) + size
        left -= size
    return found


def _by_size(
    events: DeviceEvents,
    live: np.ndarray,
    names: np.ndarray,
    asked: np.ndarray,
    sizes: np.ndarray,
    regions: list[str],
) -> None:
    """A variable whose buffer no reading can find (TensorFlow copies it on read)
    told by its size alone: the earliest-made live buffer of exactly that size
    that nothing told, made before the others (a variable lives long)."""
    own = np.isin(names, list(_TOLD_REGIONS), invert=True)
    made = events.time_ns[live]
    for size, region in zip(sizes.tolist(), regions, strict=True):
        free = np.flatnonzero(own & (asked == size))
        if region and len(free):
            position = free[int(np.argmin(made[free]))]
            names[position] = SIZED + region
            own[position] = False


def _by_address(
    events: DeviceEvents,
    live: np.ndarray,
    names: np.ndarray,
    asked: np.ndarray,
    at: int,
    readings_at: tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[str]],
) -> None:
    """The regions address readings give the live buffers at `at` (the peak).
    `readings_at`: their addresses, times, sizes, regions and the variables'
    keys ("" for a gradient, read once).

    A variable's buffer at the peak is the live one at its first reading after
    that was made by the peak and not replaced there until that reading (the
    step gave the variable its new value before the peak: a TensorFlow launch's
    output, an eager assign), else the live one at its last reading before (made
    by then). A live buffer an earlier reading of a variable found, that is no
    variable's now, is a value the step still holds beside the new one
    (SUPERSEDED: a first step's variables initialized from one shared zeros
    tensor hold it until their first update). A buffer is read only where the
    reading's size is its own (a
    buffer the capture missed, in a gap, may sit where a freed one was)."""
    positions: dict[int, list[int]] = {}
    for position, address in enumerate(events.address[live].tolist()):
        positions.setdefault(address, []).append(position)
    made = events.time_ns[live]
    allocations = np.flatnonzero(events.is_alloc & np.isin(events.address, list(positions)))
    allocated: dict[int, list[int]] = {}
    for address, time_ns in zip(
        events.address[allocations].tolist(), events.time_ns[allocations].tolist(), strict=True
    ):
        allocated.setdefault(address, []).append(time_ns)

    def holder(address: int, size: int, read_at: int, not_after: int) -> int | None:
        """The live buffer at `address` that a reading at `read_at` found: made
        by `not_after`, and nothing allocated there between it and the reading."""
        for position in positions.get(address, ()):
            born = int(made[position])
            if born > not_after or int(asked[position]) != size:
                continue
            times = allocated.get(address, [])
            later = bisect.bisect_right(times, born)
            if later == len(times) or times[later] > read_at:
                return position
        return None

    addresses, times, sizes, regions, keys = readings_at
    told = (addresses > 0) & np.array([bool(r) for r in regions], bool)
    for index in np.flatnonzero(told & np.array([not k for k in keys], bool)).tolist():
        # A gradient, read once: the buffer made last before the reading.
        found = holder(
            int(addresses[index]), int(sizes[index]), int(times[index]), int(times[index])
        )
        if found is not None:
            names[found] = regions[index]
    codes, key_of = np.unique(np.array([k or "" for k in keys], object), return_inverse=True)
    told &= codes[key_of] != ""
    # Each variable's readings reduced to what decides: at each address, its last
    # reading before the peak (linear in the readings, however many steps read it),
    # and its first reading after.
    before = np.flatnonzero(told & (times <= at))
    before = before[np.lexsort((times[before], addresses[before], key_of[before]))]
    if len(before):
        last = np.ones(len(before), bool)
        same = (key_of[before][1:] == key_of[before][:-1]) & (
            addresses[before][1:] == addresses[before][:-1]
        )
        last[:-1] = ~same
        before = before[last]
    after = np.flatnonzero(told & (times > at))
    after = after[np.lexsort((times[after], key_of[after]))]
    if len(after):
        first = np.ones(len(after), bool)
        first[1:] = key_of[after][1:] != key_of[after][:-1]
        after = after[first]
    first_after = dict(zip(key_of[after].tolist(), after.tolist(), strict=True))
    per_key: dict[int, list[int]] = {}
    for index in before.tolist():
        per_key.setdefault(int(key_of[index]), []).append(index)
    current: dict[int, str] = {}  # position -> region: some variable's buffer now
    earlier: dict[int, str] = {}  # positions an earlier reading found: its region
    for key in set(per_key) | set(first_after):
        seen = sorted(per_key.get(key, []), key=lambda i: int(times[i]))
        now = None
        if key in first_after:  # the variable's new value, made by the peak
            index = first_after[key]
            now = holder(int(addresses[index]), int(sizes[index]), int(times[index]), at)
        if now is None and seen:
            index = seen[-1]
            read_at = int(times[index])
            now = holder(int(addresses[index]), int(sizes[index]), read_at, read_at)
        if now is not None:
            current[now] = regions[index]
        for index in seen:
            read_at = int(times[index])
            found = holder(int(addresses[index]), int(sizes[index]), read_at, read_at)
            if found is not None and found != now:
                earlier[found] = regions[index]
    for position, region in earlier.items():
        if position not in current:
            names[position] = SUPERSEDED + region
    for position, region in current.items():
        names[position] = region


def _launched_outputs(program: CompiledProgram, held: int) -> int:
    """The bytes of a program's outputs among the temp buffers the run recorded
    for it: TensorFlow allocates a jit_compile launch's outputs (the variables'
    new values) with its temporaries, so the buffers hold more than the plan's
    temporaries by about the outputs' size; JAX's and PyTorch/XLA's outputs are
    arrays of their own, and their temp buffer is the plan's temporaries."""
    heap = program.heap
    if heap is None or not heap.output_bytes:
        return 0
    beyond = held - heap.temp_peak_bytes
    return min(beyond, heap.output_bytes) if beyond >= heap.output_bytes // 2 else 0


def trained_by_keras(trace: Trace) -> bool:
    """Whether Keras' fit() ran the steps (its marks: adapters/keras_steps.py)."""
    return KERAS_STEP in _mark_names(trace)


def _mark_names(trace: Trace) -> set[str]:
    return {t for t in trace.texts_at(np.flatnonzero(trace.is_kind(MARK))) if isinstance(t, str)}


def _matched(
    keys: list[tuple[str, int] | None],
    kind_of: np.ndarray,
    program: CompiledProgram,
    keras: bool,
) -> list[tuple[int, str, str]]:
    """(position in `live`, kind, how) of the live arrays (`keys`: each one's
    dtype and size, _live_keys) not yet told that are
    the program's arguments (of each dtype and size, the earliest made) and its
    new outputs (the latest). By size, not shape: XLA may hand an output back as
    a bitcast of another shape ([8,64,128] for a [512,128] parameter)."""
    heap = program.heap
    if heap is None:
        return []
    waiting: dict[tuple[str, int], collections.deque[int]] = {}
    # Live arrays the framework told already, by dtype and size: the program's
    # arguments and outputs are among them first (a step's state, told by its
    # objects), before any untold array of their size is taken for one.
    told: collections.Counter[tuple[str, int]] = collections.Counter()
    for position, key in enumerate(keys):
        if key is None:
            continue
        if kind_of[position] == "":
            waiting.setdefault(key, collections.deque()).append(position)
        else:
            told[key] += 1

    arguments = [b for b in heap.live_at_peak if b.group == PARAMETER]
    outputs = [b for b in heap.live_at_peak if b.group == OUTPUT and b.dims]
    replaced = {_buffer_key(b) for b in outputs}
    found: list[tuple[int, str, str]] = []
    # The kinds of the carried arguments of each dtype and size: the outputs of
    # one replace them one for one (a step returns the state it was given).
    carried: dict[tuple[str, int], collections.deque[tuple[str, str]]] = {}
    for argument in arguments:
        key = _buffer_key(argument)
        if told[key]:
            told[key] -= 1
            continue
        carries = key in replaced or argument.live_out
        kind, how = (STATE if carries else INPUTS), BY_FATE
        if keras:
            layout = keras_state_kind(argument.op_name)
            if layout is not None:
                kind, how = layout, BY_KERAS
        if carries:
            carried.setdefault(key, collections.deque()).append((kind, how))
        if waiting.get(key):
            found.append((waiting[key].popleft(), kind, how))
    for output in outputs:
        key = _buffer_key(output)
        if told[key]:
            told[key] -= 1
            continue
        if waiting.get(key) and carried.get(key):
            kind, how = carried[key].popleft()
            found.append((waiting[key].pop(), kind, how))
    return found


def _buffer_key(buffer: HeapBuffer) -> tuple[str, int]:
    """A program's buffer as the run's arrays are matched to it: dtype and size."""
    return (numpy_dtype(buffer.dtype), buffer.bytes)


def _live_keys(
    trace: Trace, events: DeviceEvents, live: np.ndarray
) -> list[tuple[str, int] | None]:
    """Each live array's (dtype, size), None where the trace has no dtype."""
    dtype_codes, dtype_values = trace.codes_at("dtype", events.row[live])
    sizes = events.bytes[live]
    return [
        (dtype_values[int(d)], int(size)) if d >= 0 else None
        for d, size in zip(dtype_codes, sizes, strict=True)
    ]


def _program_kinds(
    keys: list[tuple[str, int] | None],
    kind_of: np.ndarray,
    launched: np.ndarray,
    program: CompiledProgram,
    variables: dict[tuple[str, int], list[str]],
) -> ProgramKinds:
    """The kinds of a running program's arguments and outputs, as the ledger gave
    the live arrays of their dtype and size: the arguments by number (the
    earliest made first, as _matched takes them; never a buffer of the program's
    own launch), else by fate (given back: state; not: an input); its outputs,
    by their shape, the launch's own buffers (TensorFlow's outputs, made with
    it) and then the live arrays of their size left over. Where the rows name
    variables (TensorFlow's), an argument of a variable's dtype and size is of
    its kind first: variables may share a buffer (initialized from one zeros
    tensor) until their first update."""
    heap = program.heap
    if heap is None:
        return ProgramKinds()
    arguments = sorted(
        (b for b in heap.whole_values if b.group == PARAMETER and b.parameter_number >= 0),
        key=lambda b: b.parameter_number,
    )
    pool: dict[tuple[str, int], collections.deque[str]] = {}
    own: dict[tuple[str, int], collections.deque[str]] = {}
    for position, key in enumerate(keys):
        if key is not None:
            chosen = own if launched[position] else pool
            chosen.setdefault(key, collections.deque()).append(kind_of[position] or OTHER)
    kinds = [OTHER] * (arguments[-1].parameter_number + 1 if arguments else 0)
    unread = {key: collections.deque(kinds) for key, kinds in variables.items()}
    for argument in arguments:
        key = _buffer_key(argument)
        same = unread.get(key) or pool.get(key)
        fate = STATE if argument.live_out else INPUTS
        kinds[argument.parameter_number] = same.popleft() if same else fate
    outputs: dict[tuple[str, str], list[str]] = {}
    for output in heap.whole_values:
        if output.group != OUTPUT or not output.dims:
            continue
        key = _buffer_key(output)
        same = own.get(key) or pool.get(key)
        if same:
            outputs.setdefault((output.dtype, output.dims), []).append(same.popleft())
    return ProgramKinds(tuple(kinds), {k: tuple(v) for k, v in outputs.items()})
