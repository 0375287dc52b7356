"""Runs an example under PyTorch's own profiler and nothing of tpumem: the floor
of what recording PyTorch's memory events costs (profile_overhead.py --anchor
torch-profiler times this process).

    python benchmarks/torch_profiler_alone.py EXAMPLE [EXAMPLE ARGS]

As the plain PyTorch adapter starts it (adapters/torch/memory_events.py): memory
events, no op scopes but the user's, from before the script runs to its end,
where the events are read (each allocation's time, address and size), as the
adapter reads them. What tpumem adds on top: the op hook for the lines, the
module and optimizer hooks for the kinds, and writing the rows.
"""

from __future__ import annotations

import os
import runpy
import sys
import time

os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # (as tpumem sets it: no start-up error line)

import torch
from torch._C import _profiler
from torch.autograd import ProfilerConfig, ProfilerState


def main() -> None:
    script, *rest = sys.argv[1:]
    sys.argv = [script, *rest]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    # (state, record shapes, memory, Python stacks, FLOPs, modules, experimental)
    config = ProfilerConfig(
        ProfilerState.KINETO, False, True, False, False, False, _profiler._ExperimentalConfig()
    )
    activities = {_profiler.ProfilerActivity.CPU}
    torch.autograd._prepare_profiler(config, activities)
    torch.autograd._enable_profiler(config, activities, {_profiler.RecordScope.USER_SCOPE})
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        started = time.perf_counter()
        result = torch.autograd._disable_profiler()
        allocation, read = _profiler._EventType.Allocation, []
        pending = list(result.experimental_event_tree())
        while pending:
            event = pending.pop()
            if event.tag == allocation:
                fields = event.extra_fields
                read.append((event.start_time_ns, fields.ptr, fields.alloc_size))
            else:
                pending.extend(event.children)
        print(
            f"torch_profiler_alone: {len(read):,} memory events read in "
            f"{time.perf_counter() - started:.2f} s",
            file=sys.stderr,
        )
    sys.stdout.flush()
    os._exit(0)  # (kineto's exit-time crash: adapters/torch/exit_guard.py)


if __name__ == "__main__":
    main()
