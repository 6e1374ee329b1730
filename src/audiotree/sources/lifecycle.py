"""Closing ``mp_prefetch`` pipelines cleanly when the interpreter exits.

Grain asks users to ``close()`` iterators of pipelines with ``mp_prefetch``.
Scripts rarely do: a training loop ``break``s at ``max_steps`` and the process
exits with the iterator, and the last batch, alive. Grain's finalisers then run
during interpreter shutdown, after the modules they need are gone, and print
pages of ``Exception ignored in ... __del__`` and "leaked shared_memory objects"
warnings. For pipelines built on our datasets, an ``atexit`` hook (which runs
while everything is still importable):

1. closes every iterator still open;
2. unlinks the shared-memory blocks of batches the program still holds (the
   mapping stays valid until the process ends, so nothing is freed under the
   user's feet);
3. makes Grain's finalisers quiet for the rest of the shutdown: everything
   they would have done is done.
"""

from __future__ import annotations

import atexit
import functools
import threading
import weakref
from typing import Any

import grain
import jax

__all__ = ["ClosingIterDataset"]

_live_iterators: "weakref.WeakSet" = weakref.WeakSet()
# Arrays are unhashable, so shared-memory arrays are kept as id -> weak reference.
_live_shared_arrays: dict[int, "weakref.ref"] = {}
_lock = threading.Lock()


@functools.cache
def _shared_memory_array_type():
    from grain._src.python.ipc.shared_memory_array import SharedMemoryArray  # Grain has no public alias

    return SharedMemoryArray


def _track_shared_memory(element: Any) -> None:
    shared_type = _shared_memory_array_type()
    for leaf in jax.tree_util.tree_leaves(element):
        if isinstance(leaf, shared_type) and getattr(leaf, "_unlink_on_del", False):
            key = id(leaf)
            with _lock:
                _live_shared_arrays[key] = weakref.ref(leaf, lambda _, key=key: _live_shared_arrays.pop(key, None))


def _quietly(finalizer):
    def quiet(self):
        try:
            finalizer(self)
        except Exception:  # noqa: BLE001 - during shutdown there is no one to report to
            pass

    return quiet


def _release_at_exit() -> None:
    with _lock:
        iterators = list(_live_iterators)
        arrays = [a for a in (ref() for ref in list(_live_shared_arrays.values())) if a is not None]
        _live_iterators.clear()
        _live_shared_arrays.clear()
    for iterator in iterators:
        _quietly(type(iterator).close)(iterator)
    for array in arrays:
        try:
            array.shm.unlink()
            array._unlink_on_del = False
        except Exception:  # noqa: BLE001 - already unlinked elsewhere
            pass
    shared_type = _shared_memory_array_type()
    grain.DatasetIterator.__del__ = _quietly(grain.DatasetIterator.__del__)
    shared_type.__del__ = _quietly(shared_type.__del__)


atexit.register(_release_at_exit)


class _TrackingIterator(grain.DatasetIterator):
    """Passes elements through, remembering their shared-memory arrays."""

    def __next__(self):
        element = next(self._parent)
        _track_shared_memory(element)
        return element

    def get_state(self):
        return self._parent.get_state()

    def set_state(self, state):
        self._parent.set_state(state)

    def close(self) -> None:
        self._parent.close()

    def __str__(self) -> str:
        return "TrackingIterator"


class ClosingIterDataset(grain.IterDataset):
    """A pass-through whose iterators and batches are released at interpreter exit."""

    def __str__(self) -> str:
        return "ClosingIterDataset"

    def __iter__(self):
        iterator = _TrackingIterator(self._parent.__iter__())
        with _lock:
            _live_iterators.add(iterator)
        return iterator
