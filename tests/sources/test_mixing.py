"""Unit tests of ShuffledProportionalSelection and mix_shuffled (the balanced mixer)."""

from __future__ import annotations

import pickle
import sys

import grain
import numpy as np
import pytest

from audiotree.sources.mixing import ShuffledProportionalSelection, mix_shuffled


def _labels(selection, n):
    return np.array([selection[i][0] for i in range(n)])


def test_every_block_holds_each_group_in_proportion():
    sel = ShuffledProportionalSelection([sys.maxsize] * 3, [2.0, 1.0, 1.0], seed=0, block_size=400)
    labels = _labels(sel, 1200)
    for block in labels.reshape(3, 400):
        counts = np.bincount(block, minlength=3)
        assert np.all(np.abs(counts - np.array([200, 100, 100])) <= 1)


def test_a_group_is_consumed_in_its_own_order():
    sel = ShuffledProportionalSelection([sys.maxsize] * 2, [1.0, 3.0], seed=1, block_size=64)
    inner = {0: [], 1: []}
    for i in range(256):
        g, j = sel[i]
        inner[g].append(j)
    assert inner[0] == list(range(len(inner[0])))
    assert inner[1] == list(range(len(inner[1])))


def test_labels_are_shuffled_within_blocks_and_seeded():
    a = ShuffledProportionalSelection([sys.maxsize] * 2, [1.0, 1.0], seed=7, block_size=64)
    b = ShuffledProportionalSelection([sys.maxsize] * 2, [1.0, 1.0], seed=7, block_size=64)
    c = ShuffledProportionalSelection([sys.maxsize] * 2, [1.0, 1.0], seed=8, block_size=64)
    la = _labels(a, 128)
    assert la.tolist() == _labels(b, 128).tolist()
    assert la.tolist() != _labels(c, 128).tolist()
    # Not the periodic 0,1,0,1 pattern that aliases under worker strides.
    assert la[:64].tolist() != [0, 1] * 32 and la[:64].tolist() != [1, 0] * 32


def test_length_stops_when_a_finite_group_runs_out():
    sel = ShuffledProportionalSelection([10, sys.maxsize], [1.0, 1.0], seed=0, block_size=16)
    n = len(sel)
    assert 10 <= n < 40
    used = [sel[i] for i in range(n)]
    assert max(j for g, j in used if g == 0) == 9
    assert all(j < 10 for g, j in used if g == 0)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="equal length"):
        ShuffledProportionalSelection([1, 2], [1.0], seed=0)
    with pytest.raises(ValueError, match="finite and > 0"):
        ShuffledProportionalSelection([5, 5], [1.0, 0.0], seed=0)
    with pytest.raises(ValueError, match="at least one item"):
        ShuffledProportionalSelection([5, 0], [1.0, 1.0], seed=0)
    with pytest.raises(ValueError, match="block_size"):
        ShuffledProportionalSelection([5, 5], [1.0, 1.0], seed=0, block_size=4)


def test_mix_reads_items_from_the_right_group_and_pickles():
    parts = [grain.MapDataset.source([f"a{i}" for i in range(50)]), grain.MapDataset.source([f"b{i}" for i in range(50)])]
    mixed = mix_shuffled(parts, [1.0, 1.0], seed=3, block_size=16)
    items = [mixed[i] for i in range(len(mixed))]
    assert set(items) <= {f"a{i}" for i in range(50)} | {f"b{i}" for i in range(50)}
    assert len(set(items)) == len(items)  # each item of a finite group is used once
    clone = pickle.loads(pickle.dumps(mixed))
    assert [clone[i] for i in range(20)] == items[:20]
    assert mix_shuffled(parts[:1], [1.0], seed=0) is parts[0]
