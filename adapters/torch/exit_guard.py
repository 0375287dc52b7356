"""The process ends without the C++ libraries' exit-time destructors, once
PyTorch's profiler has run in it.

Kineto, the profiler's library, keeps a thread that polls for its config for
the rest of the process; at exit the static objects it and other libraries use
are destroyed while it runs, and about one run in six died by SIGSEGV or
SIGABRT after the script had ended with 0 (seen here with torch 2.9, in
pyarrow's and in PyTorch's own destructors; pytorch/kineto#1051,
pytorch/pytorch#129626). So, registered after those objects exist, a C exit
handler ends the process at once with the script's own exit status, after
Python has finalized (the script's atexit handlers, its threads, its files)
and after C's streams are flushed: handlers run last registered first, so
`fcloseall` runs, then `_exit(status)`, before the libraries' destructors.
glibc's `on_exit` gives each handler the status and an argument: `_exit` takes
the status as its one argument, `fcloseall` takes none (extra arguments are
left in registers by the C calling convention). Where there is no such C
library nothing is registered. What this skips: the C exit handlers and C++
destructors registered before it (a library that flushes a file it left open
in its destructor: HDF5's, gcov's; C++ streams written without stdio's sync),
as `os._exit` would; Python's own atexit handlers and files are done before.
"""

from __future__ import annotations

import ctypes


def end_before_library_destructors() -> bool:
    """Registers the handlers; whether it could."""
    try:
        libc = ctypes.CDLL(None)
        on_exit = libc.on_exit
        exit_now = ctypes.cast(libc._exit, ctypes.c_void_p)
        flush_all = ctypes.cast(libc.fcloseall, ctypes.c_void_p)
    except (OSError, AttributeError):  # (not glibc: nothing registered)
        return False
    on_exit.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    if on_exit(exit_now, None) != 0:
        return False
    on_exit(flush_all, None)  # (runs first: registered last)
    return True
