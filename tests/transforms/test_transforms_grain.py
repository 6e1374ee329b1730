"""Transforms chained on Grain datasets, in-process and in spawned mp_prefetch workers."""

from __future__ import annotations

import sys

import grain
import numpy as np
import pytest

import audiotree.transforms as T
import audiotree.transforms.jax as TJ
from audiotree.core import AudioTree
from test_transforms_support import add_offset, make_tree, suffix_aug


def _items(n=8, dropped=(3,)):
    rng = np.random.default_rng(0)
    items = []
    for i in range(n):
        x = (rng.standard_normal((1, 2, 800)) * 0.1).astype(np.float32)
        items.append(None if i in dropped else AudioTree.create(x, 8000, filepath=f"/data/f{i}.wav", offset=0.25 * i))
    return items


def _pipeline(items):
    ds = grain.MapDataset.source(items).seed(7)
    ds = ds.random_map(T.volume_change(-6, 6, prob=0.5))
    ds = ds.map(T.mono())
    return ds.random_map(add_offset(0.001, prob=0.5))  # a custom, test-module transform


def _stream(ds, workers):
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    if workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    out = [(t.filepath[0], np.array(t.waveform, copy=True)) for t in it]
    del it
    return sorted(out, key=lambda kv: kv[0])


def test_chain_is_lazy_deterministic_and_drops_none():
    items = _items()
    ds = _pipeline(items)
    assert len(ds) == len(items) and ds[3] is None
    first, again = ds[0], ds[0]
    np.testing.assert_array_equal(first.waveform, again.waveform)
    assert first.num_channels == 1 and first.lufs is None
    assert len(_stream(ds, 0)) == len(items) - 1


def test_chain_with_dict_elements_scope_and_output_key():
    pairs = [{"dry": t, "wet": t} for t in _items(4, dropped=())]
    ds = grain.MapDataset.source(pairs).seed(1)
    ds = ds.random_map(T.volume_change(-12, 12, split_seed=False, scope=["dry", "wet"]))
    ds = ds.map(T.mono(scope=["wet"], output_key=suffix_aug))
    ds = ds.random_map(T.choose(T.invert_phase(), T.swap_stereo(), c=1))
    for element in ds:
        assert set(element) == {"dry", "wet", "wet_aug"}
        assert element["wet_aug"].num_channels == 1


def test_jax_namespace_transforms_accept_grain_generators():
    ds = grain.MapDataset.source(_items(4, dropped=())).seed(3).random_map(TJ.volume_change(-3, 3))
    out = ds[0]
    assert out.backend == "jax" and out.waveform.shape == (1, 2, 800)


def test_order_matters_trim_after_normalisation_clears_lufs():
    tree = make_tree(batch=1, samples=8000, derived=False)
    ds = grain.MapDataset.source([tree]).seed(0).random_map(T.volume_norm(-20, -20))
    assert ds[0].lufs is not None
    assert ds.map(T.trim(0.5))[0].lufs is None
    assert grain.MapDataset.source([tree]).map(T.trim(0.5)).seed(0).random_map(T.volume_norm(-20, -20))[0].lufs is not None


@pytest.mark.skipif(sys.platform == "win32", reason="Grain multiprocessing is not supported on Windows")
@pytest.mark.slow
def test_mp_prefetch_two_workers_match_the_single_process_stream(absl_flags_parsed):
    """A plain Grain pipeline (not built by audiotree), so flags are parsed as Grain requires."""
    ds = _pipeline(_items(10, dropped=(3, 7)))
    single = _stream(ds, 0)
    multi = _stream(ds, 2)
    assert [k for k, _ in multi] == [k for k, _ in single] and len(single) == 8
    for (_, a), (_, b) in zip(single, multi):
        np.testing.assert_array_equal(a, b)
