"""Run corpus processing on one core, a process pool, any ``concurrent.futures``
executor, or a Ray cluster, with identical results.

Every function that processes a whole corpus (:func:`audiotree.sources.scan_durations`,
the window-LUFS cache, ``audiotree scan`` and ``audiotree render``) takes
``executor=``; see :func:`open_executor` for the values it accepts. Work is cut
into contiguous chunks (:func:`chunk_ranges`), each chunk is one task, and the
results come back in input order whatever the executor, the worker count or
the order in which tasks finish.
"""

from __future__ import annotations

from audiotree.parallel.chunks import auto_chunk_size, chunk_ranges
from audiotree.parallel.executors import ExecutorLike, Runner, map_chunks, map_items, open_executor

__all__ = [
    "ExecutorLike",
    "Runner",
    "auto_chunk_size",
    "chunk_ranges",
    "map_chunks",
    "map_items",
    "open_executor",
]
