"""glibc's malloc, tuned for a worker that moves large blocks of many small objects.

By default glibc serves an allocation over 128 KiB with a fresh ``mmap`` and gives
freed memory at the top of its heap back to the kernel once it is over 128 KiB (both
limits grow a little on their own). A worker that builds a 10 MB block every window and
frees thousands of 1 KB values every cycle then faults its memory in again, page by page,
each time: the Kafka extractor took 3.85–4.68 s a million records that way against
2.36–2.74 s with this (docs/workers/kafka.md, "Throughput"). Raising the three limits keeps freed memory in
the heap for the next window; what the process holds stays bounded by its peak use
plus ``trim_threshold``.

Only glibc has ``mallopt`` with these meanings; elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import logging
import platform

log = logging.getLogger("etlstage.worker")

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

MIB = 1 << 20


def keep_freed_memory(mmap_threshold: int = 64 * MIB, trim_threshold: int = 128 * MIB, top_pad: int = 16 * MIB) -> bool:
    """Serve allocations under ``mmap_threshold`` from the heap and keep up to
    ``trim_threshold`` of freed memory there. True when glibc took all three."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    settings = ((M_MMAP_THRESHOLD, mmap_threshold), (M_TRIM_THRESHOLD, trim_threshold), (M_TOP_PAD, top_pad))
    taken = all(mallopt(param, value) == 1 for param, value in settings)
    if not taken:
        log.debug("mallopt refused a setting: malloc keeps its defaults for it")
    return taken
