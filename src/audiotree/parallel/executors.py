"""``executor=``: where the chunks of a corpus job run.

:func:`open_executor` turns the value users pass into a :class:`Runner`:

* ``None`` or ``"serial"``: this process, one chunk after the other;
* any ``concurrent.futures.Executor`` (threads, processes, a Dask
  ``client.get_executor()``, ...): used as given, never shut down by us;
* ``"process"``: a ``ProcessPoolExecutor`` with one *spawned* worker per core
  (spawn, not fork: the driver may hold JAX or Grain threads). As with any
  process pool, a plain script must guard its entry point with
  ``if __name__ == "__main__":``;
* ``"ray"``: Ray tasks (``pip install 'audiotree[ray]'``) on the cluster at
  ``ray_address`` (``"auto"``, ``"ray://host:10001"``, ...), or on the cluster
  this process already joined, or a local one started for the job and shut
  down after it. A task whose worker process dies is re-run by Ray
  (``max_retries``); an exception raised by the work itself (a bad file) is
  not retried and reaches the caller as itself.

Determinism: a chunk's result depends only on the chunk, and results are put
back in chunk order, so every executor and worker count gives the same output.
Functions sent to a process pool must be picklable (defined at module level);
Ray pickles closures too.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import multiprocessing
import os
from typing import Any, Callable, Iterator, Sequence, Union

from audiotree.parallel.chunks import auto_chunk_size, chunk_ranges
from audiotree.parallel.parent_death import exit_with_parent
from audiotree.parallel.runner import Runner

__all__ = ["ExecutorLike", "Runner", "open_executor", "map_chunks", "map_items", "EXECUTOR_NAMES"]

ExecutorLike = Union[None, str, concurrent.futures.Executor, "Runner"]
EXECUTOR_NAMES = ("serial", "process", "ray")
class FuturesRunner(Runner):
    """Chunks as ``concurrent.futures`` tasks, at most ``4 x workers`` in flight."""

    name = "executor"

    def __init__(self, executor: concurrent.futures.Executor, *, workers: int | None = None, name: str = "executor"):
        self.executor = executor
        # ThreadPoolExecutor and ProcessPoolExecutor both keep their size in _max_workers.
        self.workers = max(1, int(workers or getattr(executor, "_max_workers", None) or os.cpu_count() or 1))
        self.name = name

    def run(self, func, chunks):
        return self.run_bounded(
            chunks,
            submit=lambda chunk: self.executor.submit(func, chunk),
            wait=lambda futures: concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_COMPLETED)[0],
            result=lambda future, index: future.result(),
            cancel=lambda future: future.cancel(),
        )


def _pool_worker_start(parent_pid: int) -> None:
    # A pool starts its processes from the thread that submits work, and every
    # audiotree pool is submitted to and shut down by the one thread that owns
    # it: that thread outlives the workers, so the parent-death signal is safe.
    exit_with_parent(parent_pid, main_thread=True)


def spawn_pool(workers: int | None) -> concurrent.futures.ProcessPoolExecutor:
    """A pool of *spawned* processes that exit when this process dies (see :mod:`audiotree.parallel.parent_death`)."""
    return concurrent.futures.ProcessPoolExecutor(
        max_workers=workers or os.cpu_count() or 1, mp_context=multiprocessing.get_context("spawn"),
        initializer=_pool_worker_start, initargs=(os.getpid(),),
    )


@contextlib.contextmanager
def open_executor(
    executor: ExecutorLike = None,
    *,
    ray_address: str | None = None,
    max_retries: int = 3,
    workers: int | None = None,
) -> Iterator[Runner]:
    """The :class:`Runner` for ``executor`` (see the module docstring), closed on exit.

    ``workers`` sizes the ``"process"`` pool (default: one per core);
    ``max_retries`` is how often Ray re-runs a task whose worker died. A pool or
    a Ray cluster started here is stopped on exit; one passed in is left alone.

    >>> with open_executor(None) as runner:
    ...     [result for _, result in runner.run(sum, [[1, 2], [3]])]
    [3, 3]
    """
    if isinstance(executor, Runner):
        yield executor
        return
    if ray_address is not None and executor != "ray":
        raise ValueError(f"ray_address={ray_address!r} needs executor='ray', got executor={executor!r}.")
    if executor is None or executor == "serial":
        yield Runner()
    elif isinstance(executor, concurrent.futures.Executor):
        yield FuturesRunner(executor)
    elif executor == "process":
        pool = spawn_pool(workers)
        try:
            yield FuturesRunner(pool, name="process")
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
    elif executor == "ray":
        from audiotree.parallel._ray import RayRunner

        with RayRunner.connect(address=ray_address, max_retries=max_retries) as runner:
            yield runner
    elif isinstance(executor, str):
        raise ValueError(f"Unknown executor {executor!r}; use one of {', '.join(EXECUTOR_NAMES)}, "
                         "a concurrent.futures.Executor, or None.")
    else:
        raise TypeError(f"executor must be None, {', '.join(repr(n) for n in EXECUTOR_NAMES)} or a "
                        f"concurrent.futures.Executor, got {type(executor).__name__}.")


def map_chunks(
    func: Callable[[Any], Any],
    chunks: Sequence[Any],
    *,
    executor: ExecutorLike = None,
    ray_address: str | None = None,
    progress: Callable[[int], Any] | None = None,
    sizes: Sequence[int] | None = None,
    on_result: Callable[[int, Any], Any] | None = None,
) -> list:
    """``[func(chunk) for chunk in chunks]``, run on ``executor``; results in chunk order.

    ``progress(n)`` is called in this process as each chunk finishes, with the
    chunk's size (``sizes[i]``, default ``len(chunk)``), so a bar on the driver
    advances whatever runs the work. ``on_result(index, result)`` is called
    there too, in completion order (e.g. to commit finished parts).

    >>> map_chunks(sum, [[1, 2], [3, 4, 5]])
    [3, 12]
    """
    chunks = list(chunks)
    results: list = [None] * len(chunks)
    with open_executor(executor, ray_address=ray_address) as runner:
        for index, result in runner.run(func, chunks):
            results[index] = result
            if on_result is not None:
                on_result(index, result)
            if progress is not None:
                progress(sizes[index] if sizes is not None else len(chunks[index]))
    return results


@dataclasses.dataclass(frozen=True)
class _EachItem:
    """One task: ``func`` applied to each item of a chunk (picklable when ``func`` is)."""

    func: Callable[[Any], Any]

    def __call__(self, chunk: Sequence[Any]) -> list:
        return [self.func(item) for item in chunk]


def map_items(
    func: Callable[[Any], Any],
    items: Sequence[Any],
    *,
    executor: ExecutorLike = None,
    ray_address: str | None = None,
    chunk_size: int | None = None,
    progress: Callable[[int], Any] | None = None,
) -> list:
    """``[func(item) for item in items]``, run in chunks on ``executor``; results in item order.

    ``chunk_size`` defaults to :func:`~audiotree.parallel.auto_chunk_size` for
    the executor's worker count. ``progress(n)`` is called on the driver with
    the number of items each finished chunk held.

    >>> map_items(abs, [-1, 2, -3], chunk_size=2)
    [1, 2, 3]
    """
    items = list(items)
    with open_executor(executor, ray_address=ray_address) as runner:
        size = chunk_size if chunk_size is not None else auto_chunk_size(len(items), runner.workers)
        chunks = [items[r.start:r.stop] for r in chunk_ranges(len(items), size)]
        nested = map_chunks(_EachItem(func), chunks, executor=runner, progress=progress)
    return [result for chunk in nested for result in chunk]
