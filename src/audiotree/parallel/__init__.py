"""Run corpus processing on one core, a process pool, any ``concurrent.futures``
executor, or a Ray cluster, with identical results.

Every function that processes a whole corpus (:func:`audiotree.sources.scan_durations`,
the window-LUFS cache, ``audiotree scan`` and ``audiotree render``) takes
``executor=``; see :func:`open_executor` for the values it accepts. Work is cut
into contiguous chunks (:func:`chunk_ranges`), each chunk is one task, and the
results come back in input order whatever the executor, the worker count or
the order in which tasks finish.

Tasks that write files write into their own attempt folders and the driver
adopts them in order (:mod:`audiotree.parallel.staging`), so a task retried
after its worker died writes nothing twice. A corpus job adopts all of this
with one call, e.g. ``map_chunks(write_part, chunks, executor=executor,
progress=bar.update, on_result=InOrder(commit))``.
"""

from __future__ import annotations

from audiotree.parallel.chunks import auto_chunk_size, chunk_ranges
from audiotree.parallel.executors import ExecutorLike, Runner, map_chunks, map_items, open_executor
from audiotree.parallel.staging import InOrder, attempt_dir

__all__ = [
    "ExecutorLike",
    "InOrder",
    "Runner",
    "attempt_dir",
    "auto_chunk_size",
    "chunk_ranges",
    "map_chunks",
    "map_items",
    "open_executor",
]
