"""Loader workers keep the memory they free, instead of asking the kernel for fresh pages per item.

An item of 3 s of audio allocates a few arrays of one to a few MB (the decoded
frames, the resampled copy, the padded excerpt) and a batch 17 MB or more. glibc
serves every block over its mmap threshold (128 KiB at first, raised on the fly
up to the size of the last such block freed) with a fresh ``mmap`` and returns it
with ``munmap`` when freed, and it trims the top of its heap back to the kernel
when more than twice that is free. Each fresh page is then zero-filled and
faulted in again: in a loader worker that is system CPU on every item. On the
2-core benchmark machine, with both workers busy, that system time grew from
0.2 to 0.5 ms per item with one loader process to 0.5 to 2.7 ms per item in
each of two (``benchmarks/worker_cpu.py``, benchmarks/PROFILE.md), so two
workers were worth much less than two cores.

:func:`keep_freed_memory` sets both limits once, in a worker process that
audiotree starts (Grain ``mp_prefetch`` workers of audiotree pipelines and the
workers of :class:`audiotree.torch.AudioDataLoader`): blocks up to
:data:`MMAP_THRESHOLD` come from the heap and freed memory stays mapped until
more than :data:`TRIM_THRESHOLD` of it is free at the top of the heap. The cost
is that a worker may keep up to that much freed memory resident. The trainer's
own process is never changed. Opt out with ``AUDIOTREE_WORKER_MALLOC=0``. Only
glibc is tuned; elsewhere it does nothing.

>>> keep_freed_memory.__name__  # called in workers, not here
'keep_freed_memory'
"""

from __future__ import annotations

import os
import sys

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "WORKER_MALLOC_ENV", "keep_freed_memory"]

#: Blocks up to this size (bytes) come from the heap, not from a fresh ``mmap`` (a batch of 32 x 3 s mono at 48 kHz is 18 MB).
MMAP_THRESHOLD = 32 << 20
#: The heap is trimmed only when more than this (bytes) is free at its top.
TRIM_THRESHOLD = 64 << 20
#: Set to ``0`` to leave a worker's allocator as it is.
WORKER_MALLOC_ENV = "AUDIOTREE_WORKER_MALLOC"

# mallopt parameters of glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

_done = False


def keep_freed_memory() -> bool:
    """In this (worker) process, keeps freed blocks up to :data:`MMAP_THRESHOLD` for reuse; True if set.

    Idempotent. Returns False (and changes nothing) off glibc, when
    ``AUDIOTREE_WORKER_MALLOC=0``, or when glibc refuses the values.
    """
    global _done
    if _done:
        return True
    if os.environ.get(WORKER_MALLOC_ENV, "1").strip().lower() in ("0", "false", "no"):
        return False
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it (musl's mallopt is a stub)
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # Trim first: setting the mmap threshold also ends glibc's on-the-fly adjustment of both.
    ok = bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    _done = ok
    return ok
