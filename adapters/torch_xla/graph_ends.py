"""When PyTorch/XLA's asynchronous graph executions end.

A sync (`torch_xla.sync()`, `xm.mark_step()`) launches the pending graph and
returns at once; the graph runs on the runtime's threads. Its temp is live until
it ends. PyTorch/XLA's `_on_ready_callback` would say so, but it runs a Python
callback on a runtime thread, which must take the GIL before the execution can
release its device lock, while the binding itself waits for that lock holding the
GIL: the two deadlock now and then (its own docs warn of it). So a thread of
ours waits instead, with `_xla_wait_device_ops`, which lets the GIL go while it
waits: every run launched before the wait began has ended when it returns.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tpumem.adapters.quiet import announce_thread


class GraphEnds:
    """Ends each launched run (`end(run, now)`) once the device has finished it."""

    def __init__(self, xlac: Any, end: Callable[[Any, int], None], now: Callable[[], int]) -> None:
        self._xlac, self._end, self._now = xlac, end, now
        self._launched: list[Any] = []
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="tpumem-graph-ends", daemon=True)
        self._thread.start()

    def launched(self, run: Any) -> None:
        with self._wake:
            self._launched.append(run)
            self._wake.notify()

    def stop(self, timeout_s: float) -> None:
        """Waits (up to `timeout_s`) for the runs already launched, then stops."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        announce_thread()
        while True:
            with self._wake:
                while not self._launched and not self._stopping:
                    self._wake.wait()
                runs, self._launched = self._launched, []
                if not runs and self._stopping:
                    return
            try:
                self._xlac._xla_wait_device_ops([])  # releases the GIL while it waits
            except RuntimeError:  # the runtime failed: what is left ends at stop
                return
            ended = self._now()
            for run in runs:
                self._end(run, ended)
