"""Where the memory went when an allocation failed: the causes a run's events
show, each with its bytes and its share of the limit, largest first.

"Not enough memory" is what the allocator says; what the user changes is why
there was not: bytes handed out beyond what was asked (the allocator's rounding:
BFC gives a request a whole free chunk unless the chunk is at least twice its
size, so 9 MiB requests reuse 16 MiB chunks whole), free memory in pieces too
small for the request, a compiled program's working memory live at the moment.
Each from the device's events up to the failure (measured where the trace has
requested sizes), never estimated; a cause below CAUSE_SHARE of the limit is no
cause worth a line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tpumem.analysis import provenance
from tpumem.analysis.device_events import DeviceEvents, step_marks
from tpumem.analysis.waste import internal_waste
from tpumem.trace.model import Trace

ROUNDING = "allocator rounding"
PIECES = "free memory in pieces"
TEMPORARIES = "a program's temporaries"
KEPT = "arrays kept from earlier steps"
CAUSE_SHARE = 0.05
KEPT_STEPS = 3  # step marks needed to tell a step's state from what is kept longer


@dataclass(frozen=True, slots=True)
class OomCause:
    cause: str  # ROUNDING, PIECES, TEMPORARIES or KEPT
    bytes: int
    share: float  # of `of`
    how: str
    of: str = "the limit"  # what the share is of: the limit, else the bytes in use
    # ROUNDING: the request that wasted most, the chunk it got, how many did so.
    asked_bytes: int | None = None
    given_bytes: int | None = None
    count: int = 0
    program: str | None = None  # TEMPORARIES: whose
    # KEPT: the steps they were made in (first, last), and the line that made most.
    steps: tuple[int, int] | None = None
    line: str | None = None


def oom_causes(
    trace: Trace,
    events: DeviceEvents,
    live: np.ndarray,
    whole: tuple[int | None, str],
    free: tuple[int | None, str],
    largest_free: int | None,
) -> tuple[OomCause, ...]:
    """`live`: the allocations live at the failure (indices into `events`);
    `whole`: what the shares are of and its words (the limit, else the bytes in
    use); `free`: the bytes free and how they are known."""
    size, of = whole
    if not size or size <= 0:
        return ()
    found = [
        replace(c, of=of)
        for c in (
            _rounding(events, live, size),
            _pieces(free, largest_free, size),
            _temporaries(trace, events, live, size),
            _kept(trace, events, live, size),
        )
        if c is not None and c.share >= CAUSE_SHARE
    ]
    return tuple(sorted(found, key=lambda c: -c.bytes))


def _rounding(events: DeviceEvents, live: np.ndarray, whole: int) -> OomCause | None:
    """The allocator's rounding over the live buffers (waste.py's figure), with
    the request and chunk that wasted most together: the pattern to change."""
    waste = internal_waste(events, live)
    total = waste.at_peak_bytes
    if total is None or total <= 0:
        return None  # (requested sizes not recorded, or nothing rounded)
    asked, given = events.requested[live], events.bytes[live]
    pairs, inverse = np.unique(np.stack([asked, given], axis=1), axis=0, return_inverse=True)
    wasted = np.bincount(inverse.ravel(), weights=given - asked)
    top = int(np.argmax(wasted))
    return OomCause(
        ROUNDING,
        total,
        total / whole,
        waste.label,
        asked_bytes=int(pairs[top][0]),
        given_bytes=int(pairs[top][1]),
        count=int(np.count_nonzero(inverse.ravel() == top)),
    )


def _pieces(free: tuple[int | None, str], largest_free: int | None, whole: int) -> OomCause | None:
    size, how = free
    if size is None or largest_free is None or size <= largest_free:
        return None
    pieces = size - largest_free
    return OomCause(PIECES, pieces, pieces / whole, how)


def _kept(trace: Trace, events: DeviceEvents, live: np.ndarray, whole: int) -> OomCause | None:
    """The live arrays made in a step after the first and two or more steps
    before the one that failed (a step's state is the previous step's outputs:
    one step old at most)."""
    times, numbers = step_marks(trace)
    if not len(live) or len(times) < KEPT_STEPS:
        return None
    made = np.searchsorted(times, events.time_ns[live], side="right") - 1
    failing = int(np.searchsorted(times, events.time_ns[live].max(), side="right")) - 1
    old = (made >= 1) & (made <= failing - 2)
    if not old.any():
        return None
    sizes = events.bytes[live][old]
    size = int(sizes.sum())
    sources, names = trace.codes_at("source", events.row[live][old])
    top = int(sources[int(np.argmax(sizes))])
    return OomCause(
        KEPT,
        size,
        size / whole,
        provenance.MEASURED,
        count=int(old.sum()),
        steps=(int(numbers[made[old].min()]), int(numbers[made[old].max()])),
        line=str(names[top]) if top >= 0 else None,
    )


def _temporaries(
    trace: Trace, events: DeviceEvents, live: np.ndarray, whole: int
) -> OomCause | None:
    if not len(live):
        return None
    regions, names = trace.codes_at("region", events.row[live])
    temp = [i for i, name in enumerate(names) if name == "temp"]
    held = np.isin(regions, temp)
    if not held.any():
        return None
    size = int(events.bytes[live][held].sum())
    ops, op_names = trace.codes_at("op", events.row[live][held])
    sizes = events.bytes[live][held]
    largest = int(ops[int(np.argmax(sizes))])
    program = str(op_names[largest]) if largest >= 0 else None
    return OomCause(TEMPORARIES, size, size / whole, provenance.DERIVED, program=program)
