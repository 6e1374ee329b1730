"""Unit tests of the dataset wrappers: loaders, stamping, and the memory-aware datasets."""

from __future__ import annotations

import pickle
import warnings

import grain
import numpy as np
import pytest

from audiotree import AudioTree, ExcerptConfig
from audiotree.errors import AudioReadError
from audiotree.sources.loading import ExcerptLoader, StampSource, check_on_read_error
from audiotree.sources.audio_datasets import AudioIterDataset, AudioMapDataset, default_read_options, estimate_item_bytes
from factories import noise_tree, tone_file


def test_excerpt_loader_reads_one_item_of_the_right_shape(tmp_path):
    path = tone_file(tmp_path / "a.wav", rate=16000, seconds=2.0, channels=2)
    loader = ExcerptLoader(sample_rate=8000, duration=0.5, mono=False, source="grp", channels=2)
    item = loader.random_map(path, np.random.default_rng(0))
    assert item.waveform.shape == (1, 2, 4000) and item.sample_rate == 8000
    assert item.filepath == [path] and item.source == ["grp"]
    again = loader.random_map(path, np.random.default_rng(0))
    np.testing.assert_array_equal(item.waveform, again.waveform)  # the rng decides the offset
    assert pickle.loads(pickle.dumps(loader)) == loader


def test_excerpt_loader_names_a_file_with_other_channels(tmp_path):
    path = tone_file(tmp_path / "mono.wav", channels=1)
    loader = ExcerptLoader(sample_rate=16000, duration=0.25, mono=False, channels=2)
    with pytest.raises(ValueError, match="mono.wav' has 1 channels"):
        loader.random_map(path, np.random.default_rng(0))


@pytest.mark.parametrize("policy", ["raise", "warn", "skip"])
def test_excerpt_loader_read_error_policies(tmp_path, policy):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF0000WAVEnot audio at all")
    loader = ExcerptLoader(sample_rate=16000, duration=0.25, on_read_error=policy)
    rng = np.random.default_rng(0)
    if policy == "raise":
        with pytest.raises(AudioReadError, match="bad.wav"):
            loader.random_map(str(bad), rng)
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert loader.random_map(str(bad), rng) is None
    assert any("bad.wav" in str(w.message) for w in caught) == (policy == "warn")


def test_on_read_error_is_checked():
    with pytest.raises(ValueError, match="on_read_error"):
        check_on_read_error("ignore")


def test_loudest_strategy_through_the_loader_carries_loudness(tmp_path):
    path = tone_file(tmp_path / "t.wav", seconds=3.0, amp=0.5)
    loader = ExcerptLoader(sample_rate=16000, duration=1.0, excerpt=ExcerptConfig(strategy="loudest"))
    item = loader.random_map(path, np.random.default_rng(1))
    assert item.lufs.shape == (1,) and np.isfinite(item.lufs[0])


def test_stamp_source_fills_missing_provenance():
    stamped = StampSource("music").map(AudioTree.create(np.zeros((2, 1, 4), np.float32), 8000))
    assert stamped.source == ["music", "music"] and stamped.filepath == ["", ""]
    assert np.isnan(stamped.offset).all()
    kept = StampSource("music").map(noise_tree(batch=2))
    assert kept.filepath == ["f0.wav", "f1.wav"] and kept.source == ["music", "music"]
    assert StampSource("x").map(None) is None


def test_audio_map_dataset_passes_through_and_keeps_its_size():
    parent = grain.MapDataset.range(10).map(lambda i: i * 2)
    ds = AudioMapDataset(parent, item_bytes=1000)
    assert len(ds) == 10 and ds[3] == 6
    sliced = ds[2:6]
    assert isinstance(sliced, AudioMapDataset) and sliced.item_bytes == 1000 and list(sliced) == [4, 6, 8, 10]


def test_audio_iter_dataset_tracks_batches_and_uses_audio_read_options():
    ds = AudioMapDataset(grain.MapDataset.range(8), item_bytes=4096)
    it = ds.to_iter_dataset()
    assert isinstance(it, AudioIterDataset)
    batched = it.batch(4, batch_fn=list)
    assert isinstance(batched, AudioIterDataset) and batched.element_bytes == 4 * 4096
    assert list(batched) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    options = default_read_options(4096)
    assert 1 <= options.num_threads <= 8 and options.prefetch_buffer_size >= 2 * options.num_threads


def test_a_buffer_over_a_quarter_of_ram_warns():
    huge = AudioMapDataset(grain.MapDataset.range(4), item_bytes=1 << 40)
    with pytest.warns(UserWarning, match="buffers can hold about"):
        huge.to_iter_dataset(grain.ReadOptions(num_threads=1, prefetch_buffer_size=2))


def test_item_bytes_estimate():
    assert estimate_item_bytes(channels=2, sample_rate=8000, duration=1.0) == 2 * 8000 * 4 + 2 * 1024 * 4 + 64
