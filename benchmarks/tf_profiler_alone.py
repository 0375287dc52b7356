"""Runs an example under TensorFlow's own profiler and nothing of tpumem: the floor
of what recording TensorFlow's memory events costs (profile_overhead.py
--anchor tf-profiler / tf-profiler-sessions times this process).

    python benchmarks/tf_profiler_alone.py [--sessions-of SECONDS] EXAMPLE [EXAMPLE ARGS]

As `tpumem profile` runs TensorFlow on the CPU: the BFC allocator
(TF_CPU_ALLOCATOR_USE_BFC=true, so that it records memory events). By default
the profiler runs from the start to the end in one session, its cheapest use,
whose events are gathered after the run. With --sessions-of, sessions of that
length run back to back, as tpumem runs them: TSL's thread-pool listener off,
each stopped and exported to disk by TensorFlow on a thread of its own while the
next one starts as soon as the profiler lets go of it (until 2026-11-26 the next
one waited for the export, leaving more of the run unrecorded, and so cheaper,
than tpumem's sessions). TensorFlow's own share of a capture that keeps what came
before a kill; what tpumem adds on top is reading each session into the trace.
"""

from __future__ import annotations

import ctypes
import os
import runpy
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"

import tensorflow as tf  # (after the variable above: TensorFlow reads it as it loads)
from tensorflow.python.profiler.internal import _pywrap_profiler

# The symbols adapters/tensorflow/adapter.py calls, written again here: this process runs
# nothing of tpumem's.
_LISTENER_OFF = "_ZN3tsl8profiler19threadpool_listener10DeactivateEv"
_HAS_ACTIVE_SESSION = "_ZN3tsl8profiler12ProfilerLock16HasActiveSessionEv"


def _function(library: ctypes.CDLL, symbol: str, returns: object) -> ctypes._CFuncPtr:
    function = library[symbol]
    function.restype, function.argtypes = returns, []
    return function


def _sessions(logdir: str, seconds: float, done: threading.Event) -> None:
    """Sessions back to back as tpumem runs them: each stopped and exported on a
    thread of its own while the next one starts as soon as TSL's profiler lock
    lets go of it (before the export has finished), so that they cover as much
    of the run as tpumem's do."""
    library = ctypes.CDLL(str(Path(tf.__file__).parent / "libtensorflow_framework.so.2"))
    listener_off = _function(library, _LISTENER_OFF, None)
    has_active_session = _function(library, _HAS_ACTIVE_SESSION, ctypes.c_bool)
    exports: list[threading.Thread] = []
    count = 0
    while True:
        session = _pywrap_profiler.ProfilerSession()
        session.start(os.path.join(logdir, f"chunk-{count}"), {})
        listener_off()
        finished = done.wait(seconds)
        export = threading.Thread(target=_export, args=(session, logdir, count))
        export.start()
        exports.append(export)
        session = None
        count += 1
        if finished:
            for export in exports:
                export.join()
            return
        while export.is_alive() and has_active_session():
            time.sleep(0.0005)


def _export(session: object, logdir: str, count: int) -> None:
    session.export_to_tb()  # type: ignore[attr-defined]
    shutil.rmtree(os.path.join(logdir, f"chunk-{count}"), ignore_errors=True)


def main() -> None:
    arguments = sys.argv[1:]
    seconds = None
    if arguments[:1] == ["--sessions-of"]:
        seconds, arguments = float(arguments[1]), arguments[2:]
    example, *args = arguments
    sys.argv = [example, *args]
    sys.path.insert(0, str(Path(example).parent))  # as `python example.py` has it
    logdir = tempfile.mkdtemp(prefix="tf-profiler-")
    done = threading.Event()
    rotation = None
    if seconds is None:
        tf.profiler.experimental.start(logdir)
    else:
        rotation = threading.Thread(target=_sessions, args=(logdir, seconds, done))
        rotation.start()
    try:
        runpy.run_path(example, run_name="__main__")
    finally:
        if rotation is None:
            tf.profiler.experimental.stop()
        else:
            done.set()
            rotation.join()
        shutil.rmtree(logdir, ignore_errors=True)


if __name__ == "__main__":
    main()
