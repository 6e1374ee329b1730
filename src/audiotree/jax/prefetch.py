"""Host-to-device prefetch of batches, with exact checkpoints of the iterator underneath.

A background thread pulls the next ``size`` batches from the host iterator and
starts their transfer (``jax.device_put`` returns before the copy completes),
so the next batch is on the device, or on its way, while the step runs; the
step waits only when the host cannot keep up. Pytrees keep their structure:
an :class:`~audiotree.AudioTree` comes back an ``AudioTree`` of ``jax.Array``
leaves (its provenance strings are int32 rows, so every leaf transfers; dtypes
follow JAX's rules, e.g. float64 offsets become float32 unless x64 is enabled).

Checkpoints count only the batches the caller has received. Every batch in
the buffer carries the state of the host iterator right after it was drawn;
:meth:`DevicePrefetchIterator.get_state` returns the state after the last
batch handed out, so a restored iterator resumes with the next batch, never
skipping the ones that were still buffered on the device. Determinism is the
host iterator's: the same batches arrive in the same order.

Grain's ``grain.experimental.device_put`` does the same for an ``IterDataset``
(not an iterator); use this one when the iterator is what you hold (e.g. after
``mp_prefetch``), or when you need ``get_state`` to ignore buffered batches.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import jax

from audiotree.validation import is_int

__all__ = ["DevicePrefetchIterator", "prefetch_to_device"]

_POLL_SEC = 0.05  # how often a blocked producer re-checks for stop()


class _Stop:
    """The host iterator is exhausted."""


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def _produce(host, sharding, checkpoints: bool, buffer: queue.Queue, stop: threading.Event) -> None:
    """Producer thread: draw, record the host state, start the transfer, buffer; until stopped or done."""
    while not stop.is_set():
        try:
            batch = next(host)
            state = host.get_state() if checkpoints else None
            entry: Any = (jax.device_put(batch, sharding), state)
        except StopIteration:
            entry = _Stop()
        except BaseException as error:  # handed to the consumer, raised there
            entry = _Failed(error)
        while not stop.is_set():
            try:
                buffer.put(entry, timeout=_POLL_SEC)
                break
            except queue.Full:
                continue
        if isinstance(entry, (_Stop, _Failed)):
            return


class DevicePrefetchIterator(Iterator):
    """Iterates ``jax.device_put(batch, sharding)`` over a host iterator, ``size`` batches ahead.

    Use :func:`prefetch_to_device` to make one. ``get_state``/``set_state`` are
    available when the host iterator has them (Grain's iterators do). Call
    :meth:`close` (or use it as a context manager) to stop the thread early.
    """

    def __init__(self, iterator, *, size: int = 2, sharding: Any = None):
        if not is_int(size) or size < 1:
            raise ValueError(f"size must be a positive integer (batches buffered on the device), got {size!r}")
        self._host = iterator if hasattr(iterator, "__next__") else iter(iterator)
        self._size = size
        self._sharding = sharding
        self._checkpoints = callable(getattr(self._host, "get_state", None))
        self._state = self._host.get_state() if self._checkpoints else None
        self._buffer: queue.Queue | None = None
        self._stop: threading.Event | None = None
        self._thread: threading.Thread | None = None
        self._done = False

    # -- producer ---------------------------------------------------------------------------
    def _start(self) -> None:
        self._buffer = queue.Queue(maxsize=self._size)
        self._stop = threading.Event()
        # The thread holds the host iterator, not this object, so a forgotten iterator is collected
        # (and its __del__ stops the thread).
        self._thread = threading.Thread(
            target=_produce, args=(self._host, self._sharding, self._checkpoints, self._buffer, self._stop),
            name="audiotree-device-prefetch", daemon=True)
        self._thread.start()

    def _halt(self) -> None:
        """Stops the producer and waits until it no longer touches the host iterator."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = self._buffer = self._stop = None

    # -- consumer ---------------------------------------------------------------------------
    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        if self._thread is None:
            self._start()
        entry = self._buffer.get()
        if isinstance(entry, _Stop):
            self._done = True
            self._halt()
            raise StopIteration
        if isinstance(entry, _Failed):
            self._done = True
            self._halt()
            raise entry.error
        batch, self._state = entry
        return batch

    def get_state(self) -> Any:
        """The host iterator's state after the last batch returned by ``next`` (buffered ones excluded)."""
        if not self._checkpoints:
            raise TypeError(f"the host iterator ({type(self._host).__name__}) has no get_state(); "
                            "wrap a Grain DatasetIterator to checkpoint")
        return self._state

    def set_state(self, state: Any) -> None:
        """Drops the buffered batches and resumes the host iterator from ``state``."""
        if not callable(getattr(self._host, "set_state", None)):
            raise TypeError(f"the host iterator ({type(self._host).__name__}) has no set_state()")
        self._halt()
        self._host.set_state(state)
        self._state = state
        self._done = False

    def close(self) -> None:
        """Stops the prefetch thread; buffered batches are dropped. Idempotent."""
        self._halt()
        self._done = True

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):  # a forgotten iterator must not keep its thread (and device buffers) alive
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()


def prefetch_to_device(iterator, size: int = 2, sharding: Any = None) -> DevicePrefetchIterator:
    """Keeps ``size`` batches of ``iterator`` on the device (or in transfer) ahead of the step.

    Args:
      iterator: any iterator (or iterable) of pytrees of NumPy arrays, e.g. a Grain
        ``DatasetIterator`` of batched :class:`~audiotree.AudioTree`.
      size: batches buffered on the device, >= 1. 2 overlaps one transfer with one step.
      sharding: where the leaves go, as ``jax.device_put`` takes it: ``None`` (the
        default device), a ``jax.Device``, a ``jax.sharding.Sharding`` (e.g. a
        ``NamedSharding`` splitting the batch axis over devices), or a pytree of those.

    Returns:
      A :class:`DevicePrefetchIterator` yielding the same pytrees with ``jax.Array``
      leaves, in the same order; ``get_state``/``set_state`` checkpoint the host
      iterator exactly (batches still buffered are not counted as consumed).

    >>> import numpy as np
    >>> batches = prefetch_to_device(iter([{"x": np.zeros(3)}, {"x": np.ones(3)}]), size=2)
    >>> [float(b["x"].sum()) for b in batches]
    [0.0, 3.0]
    """
    return DevicePrefetchIterator(iterator, size=size, sharding=sharding)
