"""What `tpumem profile`'s live line says: the run's figures, read every EVERY_S
from its trace as it is written (reading/following.py), in the words of
report/live_line.py. Only tpumem's own process reads the trace: the profiled
process does nothing for it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from tpumem.launch.status_line import StatusLine
from tpumem.reading.following import RunFollower
from tpumem.report.live_line import live_line
from tpumem.threads import leave_signals_to_the_script

EVERY_S = 0.5  # how often the line is read again


def follow(trace: Path, status: StatusLine) -> Callable[[], None]:
    """Keeps `status` saying how the run writing `trace` goes; returns the stop."""
    follower = RunFollower(trace).start()
    done = threading.Event()

    def keep() -> None:
        leave_signals_to_the_script()
        while not done.wait(EVERY_S):
            figures = follower.update()
            if follower.error is not None:
                status.close()  # (the run goes on; its report says what the trace holds)
                return
            if follower.started:
                status.show(f"tpumem: {live_line(figures, follower.elapsed_s())}")

    thread = threading.Thread(target=keep, name="tpumem-live", daemon=True)
    thread.start()

    def stop() -> None:
        done.set()
        thread.join(2.0)
        follower.close()
        status.close()

    return stop
