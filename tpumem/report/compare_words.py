"""The comparison's row titles: what each figure the analysis compares is called,
in the text table, the JSON comparison and the page alike."""

from __future__ import annotations

from tpumem.analysis.comparison import CHIP_KIND, CompareRow
from tpumem.report.kind_words import KIND_WORDS
from tpumem.units import format_bytes

TITLES = {
    "framework": "Framework (backend)",
    "fidelity": "Fidelity",
    "out_of_memory": "Out of memory: asked for",
    "capacity_smallest": "Smallest capacity that holds it",
    "peak": "Peak in use",
    "peak_step": "Peak at step",
    "peak_time": "Peak at time",
    "pool": "Pool held (preallocated)",
    "unused": "Unused pool at peak",
    "frag_peak": "Fragmentation at peak",
    "frag_max": "Fragmentation, maximum",
    "waste": "Internal waste at peak",
    "padding": "TPU layout padding (estimate)",
    "allocations": "Allocations",
    "rate": "Allocation rate",
    "program_temp": "Largest program temp",
    "program.name": "Step program",
    "program.peak": "Its peak",
    "program.arguments": "Arguments",
    "program.outputs": "Outputs",
    "program.aliased": "Aliased (donated)",
    "program.temps": "Temporaries at its peak",
    "program.code": "Generated code",
    "program.peak_at": "Peak at instruction",
    "program.largest": "Largest buffer at its peak",
    "program.largest_what": "  its shape and op",
}
# Rows of a capacity asked about (bytes), or of a TPU topology the run compiled for.
ABOUT = {
    "capacity_failure": "At {}: out of memory, asked for",
    "capacity_headroom": "At {}: headroom",
    "program.tpu": "On {}: per chip",
    "program.tpu-temps": "On {}: temporaries",
}


def row_title(row: CompareRow) -> str:
    if row.key.startswith(CHIP_KIND):
        return f"On {row.about}: {KIND_WORDS[row.key[len(CHIP_KIND) :]]}"
    if row.key in ABOUT:
        about = format_bytes(row.about) if isinstance(row.about, int) else row.about
        return ABOUT[row.key].format(about)
    return TITLES[row.key]
