"""How tpumem's own processes keep the C heap's freed memory (glibc's malloc).

Reading a profile makes and drops arrays of a few megabytes, a chunk of events at a
time. glibc serves each one above its threshold (128 kB at first) with fresh pages
from the kernel, and gives the heap's free top back, so the next arrays are faulted
in and zeroed again a page at a time: on a 23 MB profile, 13,000 page faults more
(47,000 in all), a few percent of `tpumem report`'s time; in the process that reads
TensorFlow's profiler sessions, 3,000 a session, a tenth of its CPU. Kept in the
heap instead, freed memory serves the next array. Only tpumem's own processes do
this (the CLI's commands, that reader), never the profiled program, whose memory is
what is measured.
"""

from __future__ import annotations

# mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD_MAX = 32 << 20  # glibc's largest on 64-bit; larger arrays are mapped
_TRIM_THRESHOLD = 1 << 30


def keep_freed_memory() -> bool:
    """Arrays up to 32 MB from the heap, and the heap not trimmed below 1 GiB free;
    False where the C library is not glibc (it has its own rules)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mapped = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
    return bool(mapped and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))
