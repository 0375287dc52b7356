"""The comparison's row titles: what each figure the analysis compares is called,
in the text table, the JSON comparison and the page alike."""

from __future__ import annotations

from tpumem.analysis.comparison import CHIP_KIND, COMPARED, PROGRAM_TEMP, CompareRow
from tpumem.report.kind_words import KIND_WORDS
from tpumem.units import format_bytes

TITLES = {
    "framework": "Framework (backend)",
    "fidelity": "Fidelity",
    "out_of_memory": "Out of memory: asked for",
    "capacity_smallest": "Smallest capacity that holds it",
    # A device's figures are titled where they are declared (analysis/figures.py).
    **{figure.key: figure.title for figure in COMPARED},
    PROGRAM_TEMP: "Largest program temp",
    "program.name": "Step program",
    "program.peak": "Its peak (plan: all outputs held)",
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
    # (The step alone: a chip's need, the fit table's, adds the arrays held beside it.)
    "program.tpu": "On {}: the step alone, per chip",
    "program.tpu-temps": "On {}: temporaries",
}


def row_title(row: CompareRow) -> str:
    if row.key.startswith(CHIP_KIND):
        return f"On {row.about}: a chip's {KIND_WORDS[row.key[len(CHIP_KIND) :]]}"
    if row.key in ABOUT:
        about = format_bytes(row.about) if isinstance(row.about, int) else row.about
        return ABOUT[row.key].format(about)
    return TITLES[row.key]
