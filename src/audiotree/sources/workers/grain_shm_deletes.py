"""Grain's background unlinks of shared-memory arrays, made safe with the garbage collector.

Grain's ``SharedMemoryArray.__del__`` hands the block's ``SharedMemory`` to a
thread pool, which closes its file descriptor and then unlinks its name. When
an array and its ``SharedMemory`` die together as cyclic garbage, the collector
runs both finalisers: the array's queues that close, and the
``SharedMemory``'s own closes the same descriptor on the collecting thread.
Such a cycle ends every finite stream: Grain's prefetch thread keeps the
stream's last element in the frame that the ``StopIteration`` ending it
references. The two closes race; the loser gets ``EBADF`` (or closes a
descriptor an unrelated file has just been given), the pool drops the error,
the name is never unlinked, and the resource tracker warns of a "leaked
shared_memory object" at exit. Measured on 2 cores under load: a leak in
about one of 15 two-worker runs over a 6-item source.

audiotree's executor takes the pool's place. Its task only unlinks the name
(no descriptor involved) and releases Grain's request counter; the descriptor
and the mapping are released by the ``SharedMemory``'s own finaliser, once, on
whichever thread drops the last reference. Other tasks run as Grain submits
them. It is installed by :func:`install` (with audiotree's exit hook, when an
audiotree iterator or data source is first made, never on import), replaces
Grain's pool for the whole process, and :func:`drain` waits for its queue at
exit. A Grain without these attributes is left alone.
"""

from __future__ import annotations

import os
import threading
from multiprocessing.pool import ThreadPool
from typing import Any

from grain.multiprocessing import SharedMemoryArray

__all__ = ["drain", "install"]

#: Grain's own bound of queued deletions (its ``enable_async_del`` default).
_MAX_OUTSTANDING = 50


def _grain_supports_async_deletes() -> bool:
    return all(hasattr(SharedMemoryArray, name) for name in
               ("_lock", "_del_thread_pool", "_outstanding_del_requests", "close_shm_async"))


def _unlink_and_release(shm: Any, unlink: bool) -> None:
    """The background half of a block's deletion: its name only; the descriptor is its finaliser's."""
    try:
        if unlink:
            try:
                shm.unlink()
            except FileNotFoundError:  # unlinked already, by the exit hook or by the owner
                pass
    finally:
        counter = SharedMemoryArray._outstanding_del_requests  # pylint: disable=protected-access
        if counter is not None:
            counter.release()


class _UnlinkingExecutor:
    """Stands in for Grain's deletion ``ThreadPool`` (``apply_async``, ``close``, ``join``).

    One thread, started lazily in each process (a forked child gets its own:
    a pool's threads do not survive ``fork``).
    """

    def __init__(self) -> None:
        self._pool: ThreadPool | None = None
        self._pid = -1
        self._lock = threading.Lock()
        if hasattr(os, "register_at_fork"):
            # A thread of the parent may hold the lock at the fork; the child must not wait for it.
            os.register_at_fork(after_in_child=self._after_fork_in_child)

    def _after_fork_in_child(self) -> None:
        self._lock = threading.Lock()

    def _threads(self) -> ThreadPool:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool, self._pid = ThreadPool(1), os.getpid()
            return self._pool

    def apply_async(self, func: Any, args: tuple = (), kwds: dict | None = None) -> Any:
        if getattr(func, "__func__", None) is SharedMemoryArray.close_shm_async.__func__ and len(args) == 2:
            return self._threads().apply_async(_unlink_and_release, args)
        return self._threads().apply_async(func, args, kwds or {})

    def close(self) -> None:
        if self._pool is not None and self._pid == os.getpid():
            self._pool.close()

    def join(self) -> None:
        if self._pool is not None and self._pid == os.getpid():
            self._pool.join()


def install() -> None:
    """Puts the executor in place of Grain's deletion pool, for this process (idempotent).

    Deletions Grain already queued on its own pool finish there.
    """
    if not _grain_supports_async_deletes():
        return
    with SharedMemoryArray._lock:  # pylint: disable=protected-access
        previous = SharedMemoryArray._del_thread_pool  # pylint: disable=protected-access
        if isinstance(previous, _UnlinkingExecutor):
            return
        SharedMemoryArray._del_thread_pool = _UnlinkingExecutor()  # pylint: disable=protected-access
        if SharedMemoryArray._outstanding_del_requests is None:  # pylint: disable=protected-access
            SharedMemoryArray._outstanding_del_requests = threading.Semaphore(_MAX_OUTSTANDING)  # pylint: disable=protected-access
    if previous is not None:
        previous.close()  # its daemon thread runs what it holds, then ends


def drain() -> None:
    """Waits for the deletions still queued, and turns background deletion off (at exit).

    The deletion threads are daemons: a script that exits right after its loop
    would lose the last few unlinks, and the resource tracker would warn about
    them. Finalisers that run later delete synchronously.
    """
    if not _grain_supports_async_deletes():
        return
    pool = SharedMemoryArray._del_thread_pool  # pylint: disable=protected-access
    if pool is None:
        return
    SharedMemoryArray._del_thread_pool = None  # pylint: disable=protected-access
    SharedMemoryArray._outstanding_del_requests = None  # pylint: disable=protected-access
    try:
        pool.close()
        pool.join()
    except Exception:  # noqa: BLE001 - at exit there is no one to report to
        pass
