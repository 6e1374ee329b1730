"""The map-style adapter and its sampler: ``TorchMapDataset`` and ``EpochSampler``.

See :mod:`audiotree.torch` and ``docs/torch.md`` for the design.
"""

from __future__ import annotations

import numbers
import sys
from typing import Any, Iterator, Sequence

import torch.utils.data as _tud

from audiotree.seeds import check_seed, epoch_rng
from audiotree.validation import renamed_keywords
from audiotree.torch.reading import (
    DEFAULT_READ_THREADS, STATE_VERSION, EpochCursor, SharedEpoch, SharedEpochMixin, check_count, check_epoch,
    check_threads, dataset_length, read_item, read_pool,
)

__all__ = ["TorchMapDataset", "EpochSampler"]


class TorchMapDataset(SharedEpochMixin, _tud.Dataset):
    """A map-style torch dataset over an audiotree (Grain) ``MapDataset``.

    ``dataset[(epoch, i)]`` is ``ds[epoch * epoch_size + i]``: item ``i`` of epoch
    ``epoch`` in Grain's own numbering, so epoch 0 reproduces ``ds`` exactly and
    each later epoch has new excerpts. Plain integer keys use the epoch set by
    :meth:`set_epoch` (shared with running workers).

    Args:
      dataset: a finite ``MapDataset`` (any audiotree builder, transformed or not).
      epoch_size: items per epoch; defaults to ``len(dataset)``. Required for an
        endless (``num_epochs=None``) dataset, or use :class:`TorchIterableDataset`.
      epoch: the epoch plain integer keys read until :meth:`set_epoch`.
      read_threads: threads that read the items of one batch concurrently in each
        process (``__getitems__``); decoding releases the GIL. ``0`` or ``1`` reads
        one at a time. Items do not depend on it.

    Use it with :class:`EpochSampler` (or :class:`AudioDataLoader`, which does).
    """

    def __init__(self, dataset: Any, *, epoch_size: int | None = None, epoch: int = 0,
                 read_threads: int = DEFAULT_READ_THREADS):
        length = dataset_length(dataset)
        if epoch_size is None:
            if length >= sys.maxsize:
                raise ValueError(
                    "This dataset is endless (num_epochs=None); pass epoch_size= (items per epoch) "
                    "or use TorchIterableDataset."
                )
            epoch_size = length
        self.dataset = dataset
        self.epoch_size = check_count("epoch_size", epoch_size)
        self.read_threads = check_threads(read_threads)
        self._length = length
        self._epoch = SharedEpoch(check_epoch(epoch))

    def __len__(self) -> int:
        return self.epoch_size

    def use_source(self, dataset: Any) -> None:
        """Reads ``dataset`` from now on (a rank's share of the rest of a run after a merged resume); a
        finite one is read whole in each epoch."""
        self.dataset = dataset
        self._length = dataset_length(dataset)
        if self._length < sys.maxsize:
            self.epoch_size = check_count("epoch_size", self._length)

    def global_index(self, epoch: int, index: int) -> int:
        """The index into the wrapped dataset of item ``index`` of ``epoch``."""
        n = self.epoch_size
        index = int(index)
        if not -n <= index < n:
            raise IndexError(f"Index {index} is out of range for an epoch of {n} items.")
        return check_epoch(epoch) * n + index % n

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, tuple):
            if len(key) != 2:
                raise IndexError(f"A key is an index or an (epoch, index) pair, got {key!r}.")
            epoch, index = key
        else:
            epoch, index = self.epoch, key
        return read_item(self.dataset, self.global_index(int(epoch), int(index)), self._length)

    def __getitems__(self, keys: Sequence[Any]) -> list:
        """The items of one batch, read by ``read_threads`` threads (torch's batched fetch)."""
        if self.read_threads <= 1 or len(keys) <= 1:
            return [self[key] for key in keys]
        return list(read_pool(self.read_threads).map(self.__getitem__, keys))


class EpochSampler(_tud.Sampler):
    """Yields ``(epoch, index)`` keys for :class:`TorchMapDataset`; resumable.

    Each ``iter()`` starts the next epoch (``epoch``, ``epoch + 1``, ...) unless
    :meth:`set_epoch` or :meth:`load_state_dict` said otherwise; with
    ``advance_epochs=False`` every pass repeats one epoch (validation). Order
    within an epoch is the dataset's own (already shuffled per epoch by audiotree's
    builders), or, with ``shuffle=True``, a permutation keyed on ``(shuffle_seed, epoch)``.

    ``state_dict()`` is ``{"epoch", "position"}``: the next key the sampler would
    yield. ``StatefulDataLoader`` (torchdata) snapshots it as each batch is drawn,
    which makes its checkpoints exact. With a plain ``DataLoader`` the sampler runs
    ahead of consumption (prefetch), so checkpoint with :class:`AudioDataLoader`.
    """

    @renamed_keywords(seed="shuffle_seed")
    def __init__(self, data_source: Any, *, shuffle: bool = False, shuffle_seed: int = 0, epoch: int = 0,
                 advance_epochs: bool = True):
        n = int(data_source) if isinstance(data_source, numbers.Integral) else dataset_length(data_source)
        self.num_items = check_count("len(data_source)", n)
        self.shuffle = bool(shuffle)
        self.shuffle_seed = check_seed("shuffle_seed", shuffle_seed)
        self._cursor = EpochCursor(check_epoch(epoch), advance_epochs)
        self._position = 0

    def __len__(self) -> int:
        return self.num_items

    def __repr__(self) -> str:
        return f"EpochSampler(num_items={self.num_items}, shuffle={self.shuffle}, shuffle_seed={self.shuffle_seed}, epoch={self.epoch})"

    @property
    def epoch(self) -> int:
        """The epoch of the next key: the one being iterated, or the one the next iteration starts."""
        return self._next_key()[0]

    @property
    def cursor(self) -> EpochCursor:
        """The epoch and position the next iteration starts at (shared with :class:`AudioDataLoader`)."""
        return self._cursor

    def set_epoch(self, epoch: int) -> None:
        """Makes the next iteration start ``epoch`` from its beginning."""
        self._cursor.set(check_epoch(epoch), 0)

    def order(self, epoch: int) -> Sequence[int]:
        """Indices of ``epoch`` in the order they are yielded."""
        if not self.shuffle:
            return range(self.num_items)
        return epoch_rng(self.shuffle_seed, check_epoch(epoch)).permutation(self.num_items)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return self._keys()

    def _keys(self) -> Iterator[tuple[int, int]]:
        # A generator: the start is decided at the first next(), so iter() calls
        # that are never consumed (StatefulDataLoader makes some) change nothing.
        epoch, start = self._cursor.begin()
        start = int(start or 0)
        order = self.order(epoch)
        self._position = start
        for position in range(start, self.num_items):
            self._position = position + 1
            yield epoch, int(order[position])

    def _next_key(self) -> tuple[int, int]:
        cursor = self._cursor
        if cursor.pending is not None or cursor.current is None:
            epoch, start = cursor.peek()
            return epoch, int(start or 0)
        if self._position < self.num_items:
            return cursor.current, self._position
        return cursor.following(), 0

    def state_dict(self) -> dict:
        epoch, position = self._next_key()
        return {"version": STATE_VERSION, "epoch": epoch, "position": position, "num_items": self.num_items,
                "shuffle": self.shuffle, "shuffle_seed": self.shuffle_seed}

    def load_state_dict(self, state: dict) -> None:
        if "seed" in state and "shuffle_seed" not in state:  # a checkpoint saved before the word became shuffle_seed
            state = {**state, "shuffle_seed": state["seed"]}
        for key in ("num_items", "shuffle", "shuffle_seed"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"This state was saved with {key}={state[key]!r}, but the sampler has {getattr(self, key)!r}."
                )
        epoch, position = check_epoch(state["epoch"]), int(state["position"])
        if not 0 <= position <= self.num_items:
            raise ValueError(f"position {position} is out of range for an epoch of {self.num_items} items.")
        if position == self.num_items:
            epoch, position = (epoch + 1 if self._cursor.advance else epoch), 0
        self._cursor.set(epoch, position)
