"""A Ctrl-C that lands in a callback the interpreter runs is not lost.

Python runs a SIGINT's handler at the next check of its main thread, and a
weakref or gc callback starts with one: a KeyboardInterrupt raised there is an
exception Python ignores ("Exception ignored in ..."), and the script runs on.
The books of JAX's and PyTorch/XLA's buffers hear of every array's death in a
weakref callback, so under tpumem a SIGINT landed in one in 5 of 8 runs of a
JAX loop (JAX's own gc callback loses one now and then without tpumem). So
while tpumem records, an interrupt that Python would ignore is raised again,
as the signal it came from, from a thread of tpumem's: raised from the hook
itself, it would land in the hook, which Python ignores too."""

from __future__ import annotations

import _thread
import signal
import sys
import threading
from typing import Any

from tpumem.adapters.base import Patches
from tpumem.adapters.quiet import announce_thread


class _Redelivery:
    """The thread that raises an ignored interrupt again, once the main thread has
    left the callback (if it lands in another, it comes back here)."""

    def __init__(self) -> None:
        self._wanted = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="tpumem-interrupts", daemon=True)
        self._thread.start()

    def ask(self) -> None:
        self._wanted.set()

    def stop(self) -> None:
        self._stopping = True
        self._wanted.set()

    def _run(self) -> None:
        announce_thread()
        while True:
            self._wanted.wait()
            self._wanted.clear()
            if self._stopping:
                return
            _thread.interrupt_main(signal.SIGINT)  # the script's own handler runs again


def keep_interrupts(patches: Patches) -> None:
    """Until `patches` are undone, an interrupt raised where Python would ignore it
    is delivered again; other ignored exceptions go to the hook that was there."""
    redelivery = _Redelivery()
    original = sys.unraisablehook

    def unraisablehook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_type, type) and issubclass(
            unraisable.exc_type, KeyboardInterrupt
        ):
            redelivery.ask()
        else:
            original(unraisable)

    def put_back() -> None:
        redelivery.stop()
        if sys.unraisablehook is unraisablehook:  # (not one the script set since)
            sys.unraisablehook = original

    sys.unraisablehook = unraisablehook
    patches.on_undo(put_back)
