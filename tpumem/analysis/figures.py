"""The figures of a device that several views show, each declared once: its key,
its title, its unit and the field of the analysis it reads.

The report's rows, the comparison, `tpumem diff` and a distributed run's spread
show these figures; each finds a figure's title, unit and value here by its key,
and their JSON names it by its key (a comparison's rows, a diff's figures, a
run's spread). A figure's own field in the report's JSON is the field it reads
(`preallocation.pool_peak_bytes`): the report's JSON is the analysis' shape.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tpumem.analysis import provenance

if TYPE_CHECKING:
    from tpumem.analysis.trace_figures import DeviceAnalysis

# Units, as a comparison's rows and the JSON name them.
BYTES, COUNT, SHARE, RATE, TIME, TEXT = "bytes", "count", "share", "per second", "ns", "text"


@dataclass(frozen=True, slots=True)
class DeviceFigure:
    key: str  # stable: the JSON's name of it (a title's words may change)
    title: str  # as a report's row, a comparison's row and a diff name it
    short: str  # for a narrow table's header
    unit: str  # BYTES, COUNT, SHARE, RATE, TIME or TEXT
    field: str  # the DeviceAnalysis field it reads, dotted
    # The field that says how it was obtained (dotted); "" where that is always the
    # same (`provenance`).
    label_field: str
    provenance: str = ""
    compared: bool = True  # a row of `tpumem compare`
    diffed: bool = False  # a row of `tpumem diff`, before and after

    def value(self, device: DeviceAnalysis) -> Any:
        return operator.attrgetter(self.field)(device)

    def label(self, device: DeviceAnalysis) -> str:
        if not self.label_field:
            return self.provenance
        return str(operator.attrgetter(self.label_field)(device))


PEAK = DeviceFigure(
    "peak", "Peak in use", "peak in use", BYTES, "peak.bytes", "peak_label", diffed=True
)
PEAK_STEP = DeviceFigure("peak_step", "Peak at step", "peak step", TEXT, "peak.step", "peak_label")
PEAK_TIME = DeviceFigure(
    "peak_time", "Peak at time", "peak time", TIME, "peak.time_ns", "peak_label"
)
POOL = DeviceFigure(
    "pool",
    "Pool held from device",
    "pool held",
    BYTES,
    "preallocation.pool_peak_bytes",
    "preallocation.pool_label",
    diffed=True,
)
UNUSED = DeviceFigure(
    "unused",
    "Unused pool at peak",
    "unused pool",
    BYTES,
    "preallocation.unused_bytes",
    "preallocation.pool_label",
)
FRAGMENTATION = DeviceFigure(
    "frag_peak",
    "Fragmentation at peak",
    "fragmentation at peak",
    SHARE,
    "fragmentation.at_peak",
    "fragmentation.label",
    diffed=True,
)
FRAGMENTATION_MAX = DeviceFigure(
    "frag_max",
    "Fragmentation, maximum",
    "fragmentation max",
    SHARE,
    "fragmentation.maximum",
    "fragmentation.label",
)
HEADROOM = DeviceFigure(
    "headroom",
    "Fragmentation headroom",
    "headroom",
    BYTES,
    "headroom_bytes",
    "headroom_label",
    compared=False,
    diffed=True,
)
WASTE = DeviceFigure(
    "waste", "Internal waste at peak", "waste", BYTES, "waste.at_peak_bytes", "waste.label"
)
PADDING = DeviceFigure(
    "padding",
    "TPU layout padding (estimate)",
    "padding",
    BYTES,
    "padding.extra_bytes",
    "padding.label",
)
# Counted from the allocator's events: measured, whatever else the device's figures are.
ALLOCATIONS = DeviceFigure(
    "allocations", "Allocations", "allocations", COUNT, "allocations", "", provenance.MEASURED
)
ALLOCATION_RATE = DeviceFigure(
    "rate", "Allocation rate", "allocation rate", RATE, "allocations_per_s", "", provenance.MEASURED
)

# In the order the comparison's and the diff's rows show them.
FIGURES = (
    PEAK,
    PEAK_STEP,
    PEAK_TIME,
    POOL,
    UNUSED,
    HEADROOM,
    FRAGMENTATION,
    FRAGMENTATION_MAX,
    WASTE,
    PADDING,
    ALLOCATIONS,
    ALLOCATION_RATE,
)
COMPARED = tuple(figure for figure in FIGURES if figure.compared)
DIFFED = tuple(figure for figure in FIGURES if figure.diffed)
