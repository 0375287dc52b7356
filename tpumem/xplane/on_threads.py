"""Work items shared out to threads, for work that lets go of the GIL (numpy's
loops, the C kernels called through ctypes)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tpumem.threads import leave_signals_to_the_script


def on_threads(work: Callable[[int], None], items: list[int], workers: int) -> None:
    """`work(item)` for every item, on `workers` threads (this one among them) that
    take the next item as they finish one. numpy (inside its loops) and the C
    kernels let go of the GIL, so chunks of events decode side by side on a
    machine's cores. The first error any thread meets is raised here, once every
    thread has stopped."""
    if workers <= 1 or len(items) <= 1:
        for item in items:
            work(item)
        return
    pending = iter(items)
    lock = threading.Lock()
    errors: list[BaseException] = []

    def take() -> None:
        while not errors:  # (a Ctrl-C stops the caller's thread; these follow)
            with lock:
                item = next(pending, None)
            if item is None:
                return
            try:
                work(item)
            except BaseException as error:  # (raised again below, on the caller's thread)
                errors.append(error)

    def helper() -> None:
        leave_signals_to_the_script()
        take()

    threads = [
        threading.Thread(target=helper, name="tpumem-decode", daemon=True)
        for _ in range(min(workers, len(items)) - 1)
    ]
    for thread in threads:
        thread.start()
    take()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
