"""How a list of work items is cut into tasks.

A chunk is a contiguous ``range`` of item indices. Chunks are small enough that
every worker gets several (so a slow file or a lost worker costs little, and
progress reaches the driver often) and large enough that per-task overhead
(a few milliseconds on Ray) stays small next to the work.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["auto_chunk_size", "chunk_ranges"]

#: Tasks per worker: enough to even out uneven files and to lose little to a retry.
CHUNKS_PER_WORKER = 8


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")
    return int(value)


def auto_chunk_size(num_items: int, workers: int, *, max_size: int = 1000) -> int:
    """Items per chunk for ``num_items`` spread over ``workers``.

    ``ceil(num_items / (workers * 8))``, clamped to ``[1, max_size]``. A pure
    function of its arguments: the same corpus on the same cluster size is
    always cut the same way (results never depend on it).

    >>> auto_chunk_size(10_000, 2)
    625
    >>> auto_chunk_size(10_000_000, 3200)
    391
    >>> auto_chunk_size(5, 16)
    1
    """
    if isinstance(num_items, bool) or not isinstance(num_items, numbers.Integral) or num_items < 0:
        raise ValueError(f"num_items must be a non-negative int, got {num_items!r}.")
    workers = _positive_int(workers, "workers")
    max_size = _positive_int(max_size, "max_size")
    return max(1, min(max_size, math.ceil(num_items / (workers * CHUNKS_PER_WORKER))))


def chunk_ranges(num_items: int, chunk_size: int, *, start: int = 0) -> list[range]:
    """Contiguous ranges ``[start, start + chunk_size), ...`` covering ``[start, num_items)``.

    >>> chunk_ranges(10, 4)
    [range(0, 4), range(4, 8), range(8, 10)]
    """
    chunk_size = _positive_int(chunk_size, "chunk_size")
    return [range(lo, min(lo + chunk_size, num_items)) for lo in range(start, num_items, chunk_size)]
