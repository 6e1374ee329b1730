"""Unit tests of EpochShuffledMapDataset: the per-epoch permutation of a file list."""

from __future__ import annotations

import pickle
import sys

import grain
import pytest

from audiotree.sources.epoch_order import EpochShuffledMapDataset


def _ds(n=10, *, seed=3, num_epochs=3, shuffle=True):
    return EpochShuffledMapDataset(grain.MapDataset.range(n), seed=seed, num_epochs=num_epochs, shuffle=shuffle)


def test_every_epoch_is_a_permutation_and_epochs_differ():
    ds = _ds(10, num_epochs=3)
    assert len(ds) == 30
    epochs = [[ds[e * 10 + k] for k in range(10)] for e in range(3)]
    for order in epochs:
        assert sorted(order) == list(range(10))
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2]


def test_order_is_a_pure_function_of_seed_and_index():
    a, b = _ds(seed=5), _ds(seed=5)
    assert [a[i] for i in range(30)] == [b[i] for i in reversed(range(30))][::-1]
    assert [a[i] for i in range(10)] != [_ds(seed=6)[i] for i in range(10)]


def test_unshuffled_repeats_in_order():
    ds = _ds(4, shuffle=False, num_epochs=2)
    assert [ds[i] for i in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]


def test_endless_and_negative_indices():
    ds = _ds(4, num_epochs=None)
    assert len(ds) == sys.maxsize
    finite = _ds(4, num_epochs=2)
    assert finite[-1] == finite[7]
    assert ds.parent_index(4 * 1000 + 2) in range(4)  # far epochs stay random access


def test_slices_and_pickling_keep_the_order():
    ds = _ds(6, num_epochs=2)
    assert list(ds[2:5]) == [ds[2], ds[3], ds[4]]
    clone = pickle.loads(pickle.dumps(ds))
    assert [clone[i] for i in range(12)] == [ds[i] for i in range(12)]


def test_empty_parent_is_refused():
    with pytest.raises(ValueError, match="empty"):
        _ds(0)


def test_the_epoch_cache_keeps_the_two_newest_epochs_and_pickles_empty():
    import pickle

    ds = _ds(10)
    for epoch in (0, 1, 0, 2):
        ds.permutation(epoch)
    assert sorted(ds._cache.keys()) == [1, 2]  # epoch 0 was computed first: reading it again does not keep it
    copy = pickle.loads(pickle.dumps(ds))
    assert len(copy._cache) == 0 and copy.permutation(2).tolist() == ds.permutation(2).tolist()
