"""tpumem's own threads, named to the launcher so that what a framework logs on
them (TensorFlow's profiler logs four lines for every session it starts and
stops) can be dropped from the script's stderr, and nothing else.

Framework logs (absl's format) carry the id of the thread that wrote them. When
`tpumem profile` filters the script's stderr it sets QUIET_VARIABLE, and each
tpumem thread writes its id on stderr, in a line the launcher takes out, before
the thread does anything that logs: the launcher drops framework log lines from
those threads (tpumem/launch/stderr_filter.py).
"""

from __future__ import annotations

import os
import threading

from tpumem.adapters.launch_protocol import ANNOUNCEMENT, QUIET_VARIABLE
from tpumem.threads import leave_signals_to_the_script

_enabled = os.environ.pop(QUIET_VARIABLE, None) == "1"


def announce_thread() -> None:
    """Names the calling thread as tpumem's to the launcher's stderr filter, and
    leaves the script's signals to the script's threads."""
    leave_signals_to_the_script()
    if _enabled:
        os.write(2, ANNOUNCEMENT + str(threading.get_native_id()).encode() + b"\n")
