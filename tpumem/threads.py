"""What every thread tpumem starts does first."""

from __future__ import annotations

import signal

# Signals a user sends to their script (Ctrl-C, kill, a closed terminal).
_SCRIPT_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def leave_signals_to_the_script() -> None:
    """Blocks the script's signals on the calling thread. The kernel hands a
    process's signal to any thread that does not block it; Python runs its handler
    on the main thread, but only a signal the main thread itself takes wakes it from
    a sleep or a blocking call. A Ctrl-C taken by a tpumem thread (or by one a
    framework started from it) would leave the script asleep."""
    signal.pthread_sigmask(signal.SIG_BLOCK, _SCRIPT_SIGNALS)
