"""Closing audiotree's ``mp_prefetch`` iterators when the interpreter exits.

Grain asks users to ``close()`` iterators of pipelines with ``mp_prefetch``.
Scripts rarely do: a training loop ``break``s at ``max_steps`` and the process
exits with the iterator, and the last batch, alive. Grain's finalisers then run
during interpreter shutdown, after the modules they need are gone, and print
pages of ``Exception ignored in ... __del__`` and "leaked shared_memory"
warnings. For the iterators of pipelines built with audiotree's ``mp_prefetch``
(and only those: they are tracked with weak references), an ``atexit`` hook,
which runs while everything is still importable:

1. closes every such iterator still open, and every Grain iterator inside it,
   which stops its workers; their finalisers, which would only close them
   again (and fail on modules already gone), are retired by giving each of
   these objects a subclass of its own class whose ``__del__`` does nothing;
2. unlinks the shared-memory blocks of the batches those iterators returned
   and the program still holds, and tells each block it no longer owns the
   name (the mapping stays valid until the process ends, so nothing is freed
   under the user's feet);
3. waits for the blocks still being unlinked on the background thread
   (:mod:`audiotree.sources.workers.grain_shm_deletes`, which also keeps those
   unlinks from racing the garbage collector; the thread is a daemon, so an
   exit right after the loop lost the last few, and the resource tracker
   warned about them). The data sources
   (``TreeDataSource``, ``AudioDataSource``, ArrayRecord) register this hook
   too, for pipelines built with ``grain.MapDataset.source`` directly.

Grain's finaliser of a shared-memory block still runs at shutdown and may find its
modules gone. Rather than replacing ``SharedMemoryArray.__del__`` for every
array in the process, each shared-memory leaf our iterators return is given a
subclass, :class:`_OwnedSharedMemoryArray`, whose finaliser is Grain's but
drops errors during shutdown (views made from the leaf inherit it). Arrays
and iterators of other pipelines are untouched, and so is every Grain class.
The hook is registered when the first such iterator is created, not on import.
"""

from __future__ import annotations

import atexit
import functools
import sys
import threading
import weakref
from typing import Any, Callable

import grain
import jax
from grain.multiprocessing import SharedMemoryArray

from audiotree.sources.workers import grain_shm_deletes
from audiotree.sources.workers.start import disarm_this_thread, hold_grain_flag

__all__ = ["ClosingIterDataset", "hold_grain_flag_while_alive"]

_live_iterators: "weakref.WeakSet" = weakref.WeakSet()
# Arrays are unhashable, so shared-memory arrays are kept as id -> weak reference.
_live_shared_arrays: dict[int, "weakref.ref"] = {}
_lock = threading.Lock()
_hook_registered = False
_exiting = False  # set by the exit hook


class _OwnedSharedMemoryArray(SharedMemoryArray):
    """A shared-memory leaf one of our iterators returned.

    Elements get this class as they leave our iterator (views made from them
    inherit it), so only arrays audiotree handed out are affected. Its
    finaliser is Grain's; only during interpreter shutdown, when the modules
    Grain's finaliser needs may already be gone and the exit hook has unlinked
    the block, a failure is dropped instead of printed.
    """

    def __del__(self) -> None:
        try:
            super().__del__()
        except Exception:  # noqa: BLE001 - only reachable at shutdown, see above
            if not sys.is_finalizing() and not _exiting:
                raise


def _track_shared_memory(element: Any) -> None:
    for leaf in jax.tree_util.tree_leaves(element):
        if type(leaf) is SharedMemoryArray:  # pylint: disable=unidiomatic-typecheck
            leaf.__class__ = _OwnedSharedMemoryArray
            if getattr(leaf, "_unlink_on_del", False):
                key = id(leaf)
                with _lock:
                    _live_shared_arrays[key] = weakref.ref(leaf, lambda _, key=key: _live_shared_arrays.pop(key, None))


@functools.cache
def _closed_variant(cls: type) -> type:
    """``cls`` with a finaliser that does nothing: for iterators the exit hook closed.

    Grain's ``DatasetIterator.__del__`` only calls ``close()``, which the hook
    has already done while every module was importable; at shutdown some
    ``close()`` methods fail on module globals that are gone.
    """
    return type(cls.__name__, (cls,), {"__del__": lambda self: None, "__module__": cls.__module__,
                                       "__qualname__": cls.__qualname__})


def _pipeline_iterators(root: grain.DatasetIterator, limit: int = 10_000) -> list:
    """Every Grain iterator reachable from ``root`` through attributes and containers."""
    found, seen, stack = [], set(), [root]
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, grain.DatasetIterator):
            found.append(obj)
            stack.extend(vars(obj).values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
        elif isinstance(obj, dict):
            stack.extend(obj.values())
    return found


def _close_quietly(root: grain.DatasetIterator) -> None:
    """Closes ``root`` and every iterator below it, and retires their finalisers."""
    for iterator in _pipeline_iterators(root):
        try:
            iterator.close()
        except Exception:  # noqa: BLE001 - at exit there is no one to report to
            pass
        try:
            iterator.__class__ = _closed_variant(type(iterator))
        except TypeError:  # a layout that refuses a subclass: keep Grain's finaliser
            pass


def _release_at_exit() -> None:
    global _exiting
    _exiting = True
    with _lock:
        iterators = list(_live_iterators)
        arrays = [a for a in (ref() for ref in list(_live_shared_arrays.values())) if a is not None]
        _live_iterators.clear()
        _live_shared_arrays.clear()
    for iterator in iterators:
        _close_quietly(iterator)
    for array in arrays:
        try:
            array.shm.unlink()
            # The block's finaliser now only unmaps: its name is gone already.
            array._unlink_on_del = False  # pylint: disable=protected-access
        except Exception:  # noqa: BLE001 - already unlinked elsewhere
            pass
    grain_shm_deletes.drain()


def _register_exit_hook() -> None:
    """Registers the exit hook once, and makes Grain's background unlinks safe (see grain_shm_deletes)."""
    global _hook_registered
    with _lock:
        if _hook_registered:
            return
        atexit.register(_release_at_exit)
        _hook_registered = True
    grain_shm_deletes.install()


def hold_grain_flag_while_alive(owner: object) -> None:
    """Holds :func:`~audiotree.sources.workers.start.hold_grain_flag` until ``owner`` is garbage collected.

    For audiotree's data sources, which users hand to ``grain.MapDataset.source``
    themselves: that pipeline's ``mp_prefetch`` is Grain's, so nothing of ours
    runs when its workers start, and Grain reads its flag then. Also registers
    the exit hook, which lets Grain finish unlinking the shared memory of items
    already dropped.
    """
    weakref.finalize(owner, hold_grain_flag())
    _register_exit_hook()


class _Hold:
    """Holds a preparation (``acquire()`` returns its release) while needed, at most once."""

    def __init__(self, acquire: Callable[[], Callable[[], None]]):
        self._acquire = acquire
        self._release: Callable[[], None] | None = None

    def take(self) -> None:
        if self._release is None:
            self._release = self._acquire()

    def drop(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()


class _TrackingIterator(grain.DatasetIterator):
    """Passes elements through, remembering their shared-memory arrays.

    With a ``hold`` (:func:`audiotree.sources.workers.start.hold_grain_flag`), it
    holds it while workers may start: from creation until the stream ends,
    again after ``set_state`` (which may restart workers), and never after
    ``close()`` or garbage collection.
    """

    def __init__(self, parent: grain.DatasetIterator, hold: _Hold | None, reader: Any = None):
        super().__init__(parent)
        self._hold = hold
        # A batch_slots.SlotReader when the workers send batches through reused slots.
        self._reader = reader
        if hold is not None:
            weakref.finalize(self, hold.drop)

    def __next__(self):
        if self._hold is not None:
            self._hold.take()
        try:
            element = next(self._parent)
        except StopIteration:
            if self._hold is not None:
                self._hold.drop()
            raise
        except BaseException as error:
            disarm_this_thread()
            self._sweep(error)
            raise
        if self._reader is not None:
            element = self._reader.open(element)
        _track_shared_memory(element)
        return element

    def _sweep(self, error: BaseException | None = None) -> None:
        """Unlinks the batch slots of workers that are gone (a failed or closed iterator)."""
        if self._reader is None:
            return
        removed = self._reader.sweep()
        if removed and error is not None and hasattr(error, "add_note"):
            error.add_note(f"audiotree removed {len(removed)} shared-memory batch slot(s) of stopped workers.")

    def get_state(self):
        return self._parent.get_state()

    def set_state(self, state):
        if self._hold is not None:
            self._hold.take()
        try:
            self._parent.set_state(state)
        except BaseException:
            disarm_this_thread()
            raise

    def close(self) -> None:
        try:
            self._parent.close()
        finally:
            if self._hold is not None:
                self._hold.drop()
            self._sweep()

    def __str__(self) -> str:
        return "TrackingIterator"


class ClosingIterDataset(grain.IterDataset):
    """A pass-through whose iterators and batches are released at interpreter exit.

    With ``prepare_workers`` (audiotree's default), creating an iterator also
    holds :func:`audiotree.sources.workers.start.hold_grain_flag` until it closes.
    """

    def __init__(self, parent: grain.IterDataset, *, prepare_workers: bool = True, slot_token: str | None = None):
        super().__init__(parent)
        self._prepare_workers = prepare_workers
        # Set when the workers' pipeline ends in batch_slots.SlotWriterIterDataset with this token.
        self._slot_token = slot_token

    def __str__(self) -> str:
        return "ClosingIterDataset"

    @property
    def slot_token(self) -> str | None:
        """The token of the shared-memory batch slots the workers write through; ``None``: Grain's own path."""
        return self._slot_token

    def __iter__(self):
        hold = None
        if self._prepare_workers:
            hold = _Hold(hold_grain_flag)
            hold.take()  # Grain may create workers' iterators as soon as it has ours
        try:
            reader = None
            if self._slot_token is not None:
                from audiotree.sources.workers.batch_slots import SlotReader, prepare_tracker

                prepare_tracker()
                reader = SlotReader(self._slot_token)
            iterator = _TrackingIterator(self._parent.__iter__(), hold, reader)
        except BaseException:
            if hold is not None:
                hold.drop()
            raise
        _register_exit_hook()
        with _lock:
            _live_iterators.add(iterator)
        return iterator
