"""`--tpu`: a trace's programs compiled by XLA:TPU for a topology, before its report."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tpumem.units import counted

if TYPE_CHECKING:
    from tpumem.reading.object_storage import Fetched
    from tpumem.tpu.topology import Topology


def compile_for_tpus(
    traces: list[Path],
    topologies: Sequence[Topology],
    quiet: bool = False,
    stored: Fetched | None = None,
) -> None:
    """`--tpu`: each trace's programs compiled for each topology, kept in the trace.
    A trace whose programs cannot be compiled says so in one line and keeps its report.
    `stored`: the traces in object storage, each brought whole first (the compiles
    are kept in the copy this command reads, not where the trace is kept)."""
    if not topologies:
        return
    if stored is not None:
        for trace in traces:
            stored.fetch(trace)
    from tpumem.errors import TpumemError
    from tpumem.reading.summary_files import summary_kept
    from tpumem.tpu.compile import compile_for_tpu, refuse_live
    from tpumem.trace.reader import load

    for trace in traces:
        refuse_live(trace)  # a run still going: the command ends here, nothing added
    for trace in traces:
        with summary_kept(trace):  # (the compiles are appended to the trace)
            for topology in topologies:
                try:
                    outcome = compile_for_tpu(trace, load(trace), topology, quiet)
                except TpumemError as error:
                    print(f"tpumem: no TPU compile: {error}", file=sys.stderr)
                    continue
                if quiet or outcome.already:
                    continue
                failed = f", {outcome.failed:,} failed" if outcome.failed else ""
                print(
                    f"tpumem: compiled {counted(outcome.programs, 'program')} of {trace.name} for "
                    f"{topology.name} with XLA:TPU in {outcome.seconds:.1f} s{failed}",
                    file=sys.stderr,
                )
