"""PyTorch's own record of its allocator: the profiler's memory events.

Every allocation and free of PyTorch's allocators (`c10::reportMemoryUsage`)
reaches the profiler with its address, size and time; nothing else in PyTorch
tells them on the CPU. The profiler is started with memory events and no op
scopes but the user's (`record_function`): each op's own event would cost the
loop a fifth more (measured: benchmarks/torch_cpu_events.py), and the line
that made a buffer comes from the op hook instead (op_lines.py).

The profiler keeps its events until it stops, so the session is read in
chunks: stopped between two steps on the thread that started it (the
profiler's state is that thread's), what it held read into rows, and only then
started again. A script that
starts a profiler of its own (torch.profiler.profile) has it: this session
stops first, and starts again when the script's stops; the trace marks the gap.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

CPU, OTHER = 0, 1  # where an event's memory is: the CPU's, or a device's (CUDA)


@dataclass(frozen=True, slots=True)
class MemoryEvents:
    """One chunk's allocator events in time order: `sizes` > 0 an allocation,
    < 0 a free; `times` in the profiler's clock (Unix nanoseconds)."""

    times: np.ndarray
    addresses: np.ndarray
    sizes: np.ndarray
    devices: np.ndarray  # CPU or OTHER

    def __len__(self) -> int:
        return len(self.times)


def read_events(result: Any, allocation: Any, devices: bool) -> MemoryEvents:
    """The allocator events of a stopped profiler's result. With no op scopes, an
    allocation is a root of the event tree or a child of a user's scope (an
    optimizer's step records one). Each field read costs a call into PyTorch
    (about 5 us an event in all, as much again as the profiler's own stop):
    `devices` False where no device but the CPU was in use, and each event's is
    not asked."""
    rows: list[tuple[int, int, int, int]] = []
    append = rows.append
    pending = list(result.experimental_event_tree())
    pending.reverse()
    while pending:
        event = pending.pop()
        if event.tag == allocation:
            fields = event.extra_fields
            where = CPU if not devices or fields.device.type == "cpu" else OTHER
            append((event.start_time_ns, fields.ptr, fields.alloc_size, where))
        else:
            children = list(event.children)
            children.reverse()
            pending.extend(children)
    table = np.array(rows, dtype=np.int64).reshape(-1, 4)
    table = table[np.argsort(table[:, 0], kind="stable")]
    return MemoryEvents(table[:, 0], table[:, 1], table[:, 2], table[:, 3])


class ProfilerSession:
    """PyTorch's profiler, with memory events only, read in chunks."""

    def __init__(self, torch: Any) -> None:
        from torch._C import _profiler
        from torch.autograd import ProfilerConfig, ProfilerState

        self._autograd = torch.autograd
        self.allocation = _profiler._EventType.Allocation
        self._activities = {_profiler.ProfilerActivity.CPU}
        self._scopes = {_profiler.RecordScope.USER_SCOPE}
        # (state, record shapes, memory, Python stacks, FLOPs, modules, experimental)
        self._config = ProfilerConfig(
            ProfilerState.KINETO, False, True, False, False, False, _profiler._ExperimentalConfig()
        )
        self.running = False
        self.started = False  # ever, in this process's recording
        self.thread_id: int | None = None

    def start(self) -> None:
        autograd = self._autograd
        autograd._prepare_profiler(self._config, self._activities)
        autograd._enable_profiler(self._config, self._activities, self._scopes)
        self.running = self.started = True
        self.thread_id = threading.get_ident()

    def stop(self) -> Any:
        """Stops the profiler; returns its result, unread (None if it was not running)."""
        if not self.running:
            return None
        self.running = False
        return self._autograd._disable_profiler()
