"""The iterable adapter for endless streams, sharded by worker: ``TorchIterableDataset``.

See :mod:`audiotree.torch` and ``docs/torch.md`` for the design.
"""

from __future__ import annotations

import collections
import sys
import warnings
from typing import Any

import torch.utils.data as _tud

from audiotree.sources.global_stream import StreamPosition
from audiotree.torch.reading import (
    DEFAULT_READ_THREADS, ENDLESS_EPOCH_STRIDE, ENDLESS_LENGTH_ERROR, STATE_VERSION, SharedEpoch, SharedEpochMixin,
    check_count, check_epoch, check_threads, dataset_length, read_item, read_pool, worker_info,
)

__all__ = ["TorchIterableDataset", "ShardIterator"]


class ShardIterator:
    """One worker's share of one epoch; stateful for torchdata's StatefulDataLoader.

    With ``read_threads > 1`` it reads up to ``2 * read_threads`` items ahead on
    a thread pool. ``consumed`` counts items handed out, so read-ahead never shows
    in the state; items are pure functions of their index, so it never changes them.
    """

    def __init__(self, source: "TorchIterableDataset", epoch: int, role: int, num_roles: int, consumed: int,
                 base: StreamPosition | None = None):
        self._source = source
        self.epoch, self.role, self.num_roles, self.consumed = epoch, role, num_roles, int(consumed)
        # Items of the epoch consumed before a resume with another worker count: the roles share the rest.
        self.base = base or StreamPosition()
        self._ahead: collections.deque = collections.deque()

    def __iter__(self) -> "ShardIterator":
        return self

    def _read(self, position: int) -> Any:
        source = self._source
        index = source.epoch_start(self.epoch) + self.base.remaining(self.role + position * self.num_roles)
        return read_item(source.dataset, index, source._length)

    def __next__(self) -> Any:
        total = self._source.shard_size(self.role, self.num_roles, self.base)
        if total is not None and self.consumed >= total:
            raise StopIteration
        threads = self._source.read_threads
        if threads <= 1:
            self.consumed += 1
            return self._read(self.consumed - 1)
        position = self.consumed + len(self._ahead)
        while len(self._ahead) < 2 * threads and (total is None or position < total):
            self._ahead.append(read_pool(threads).submit(self._read, position))
            position += 1
        self.consumed += 1
        return self._ahead.popleft().result()

    def state_dict(self) -> dict:
        state = {"version": STATE_VERSION, "epoch": self.epoch, "role": self.role, "num_workers": self.num_roles,
                 "consumed": self.consumed}
        if self.base.count:
            state["base"] = self.base.to_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        for future in self._ahead:
            future.cancel()
        self._ahead.clear()
        self.epoch = check_epoch(state["epoch"])
        self.role, self.num_roles, self.consumed = int(state["role"]), int(state["num_workers"]), int(state["consumed"])
        self.base = StreamPosition.from_dict(state.get("base", {"prefix": 0}), where="base")


class TorchIterableDataset(SharedEpochMixin, _tud.IterableDataset):
    """An iterable torch dataset over an audiotree (Grain) ``MapDataset``, sharded by worker.

    Epoch ``e`` covers indices ``[e * S, (e + 1) * S)`` of the wrapped dataset,
    ``S = epoch_size``; worker ``w`` of ``k`` reads ``w, w + k, w + 2k, ...`` of that
    range, so the epoch's multiset is the same for any ``num_workers``. Without
    ``epoch_size`` a finite dataset uses its length, and an endless one never ends
    (epoch ``e`` then starts at ``e * 2**36``).

    Items are yielded as they are, ``None`` included, so that every batch covers a
    fixed span of indices (which keeps resuming exact); :func:`collate` drops them.

    Call :meth:`set_epoch` before each epoch when you drive a plain ``DataLoader``
    (:class:`AudioDataLoader` does it for you). The iterator returned in each
    worker has ``state_dict``/``load_state_dict``, which torchdata's
    ``StatefulDataLoader`` uses. ``read_threads`` as in :class:`TorchMapDataset`
    (here each worker reads ahead of its consumer).
    """

    def __init__(self, dataset: Any, *, epoch_size: int | None = None, epoch: int = 0,
                 read_threads: int = DEFAULT_READ_THREADS):
        length = dataset_length(dataset)
        if epoch_size is None and length < sys.maxsize:
            epoch_size = length
        self.dataset = dataset
        self._length = length
        self.epoch_size = None if epoch_size is None else check_count("epoch_size", epoch_size)
        self.read_threads = check_threads(read_threads)
        self._epoch = SharedEpoch(check_epoch(epoch))
        self._resume: dict | None = None
        self._seen_stamp: int | None = None
        self._warned = False

    def __len__(self) -> int:
        """Items per epoch (``epoch_size``). An endless stream has none: the error says what to pass."""
        if self.epoch_size is None:
            raise TypeError(ENDLESS_LENGTH_ERROR)
        return self.epoch_size

    def __bool__(self) -> bool:  # truth must not depend on len(), which an endless stream refuses
        return True

    def use_source(self, dataset: Any) -> None:
        """Reads ``dataset`` from now on (a rank's share of the rest of a run after a merged resume)."""
        self.dataset = dataset
        self._length = dataset_length(dataset)

    def resume_at(self, resume: dict | None) -> None:
        """Makes the next ``iter()`` continue epoch ``resume["epoch"]`` mid-way (``None``: from its start).

        ``resume`` holds ``epoch``, ``num_workers``, ``shift`` (the role of worker
        0) and ``consumed`` (items each role already delivered). The setting is
        read once by the next ``iter()`` (in each worker, which gets a copy of the
        dataset as it is when the workers start) and then cleared.
        """
        self._resume = None if resume is None else dict(resume)

    def epoch_start(self, epoch: int) -> int:
        return epoch * (self.epoch_size or ENDLESS_EPOCH_STRIDE)

    def shard_size(self, role: int, num_roles: int, base: StreamPosition | None = None) -> int | None:
        """Items of an epoch that worker ``role`` of ``num_roles`` reads (``None``: endless), of the
        items ``base`` (consumed before a resume with another worker count) does not hold."""
        if self.epoch_size is None:
            return None
        held = 0 if base is None else base.count_below(self.epoch_size)
        return max(0, -(-(self.epoch_size - held - role) // num_roles))

    def __iter__(self) -> ShardIterator:
        worker, num_workers = worker_info()
        epoch, stamp = self._epoch.read()
        if self._seen_stamp == stamp and not self._warned:
            self._warned = True
            warnings.warn(
                f"TorchIterableDataset is reading epoch {epoch} again without set_epoch(), so this pass repeats "
                "the previous excerpts. Call dataset.set_epoch(n) before each epoch (AudioDataLoader does it).",
                UserWarning,
                stacklevel=2,
            )
        self._seen_stamp = stamp
        role, consumed, base = worker, 0, None
        resume, self._resume = self._resume, None
        if resume is not None and resume["epoch"] == epoch:
            if resume["num_workers"] != num_workers:
                # AudioDataLoader turns a checkpoint of another worker count into a base (consumed items).
                raise ValueError(
                    f"Resuming mid-epoch needs the same number of workers ({resume['num_workers']}), got "
                    f"{num_workers}; AudioDataLoader.load_state_dict resumes with any num_workers."
                )
            role = (worker + resume["shift"]) % num_workers
            consumed = resume["consumed"][role]
            if resume.get("base"):
                base = StreamPosition.from_dict(resume["base"], where="base")
        return ShardIterator(self, epoch, role, num_workers, consumed, base)
