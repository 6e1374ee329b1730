"""ExcerptConfig validation, from_file reads, and the three excerpt strategies."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile

from audiotree import AudioTree, ExcerptConfig
from audiotree.excerpts.config import search_bias_early, search_uniform


def _sparse_file(path, *, rate=16000, seconds=24.0, loud_at=13.0, loud_seconds=3.3, channels=1):
    """Near-silence (-80 dBFS noise) with one loud passage a bit longer than 3 s."""
    rng = np.random.default_rng(1)
    n = int(seconds * rate)
    data = rng.standard_normal((n, channels)).astype(np.float32) * 1e-4
    start, stop = int(loud_at * rate), int((loud_at + loud_seconds) * rate)
    t = np.arange(stop - start) / rate
    data[start:stop] += (0.3 * np.sin(2 * np.pi * 440 * t))[:, None].astype(np.float32)
    soundfile.write(path, data, rate, subtype="FLOAT")
    return path, (loud_at, loud_at + loud_seconds)


def test_config_validation():
    assert ExcerptConfig().strategy == "random"
    with pytest.raises(ValueError, match="strategy"):
        ExcerptConfig(strategy="middle")
    with pytest.raises(ValueError, match="on_failure"):
        ExcerptConfig(strategy="loudest", on_failure="retry")
    with pytest.raises(ValueError, match="num_tries"):
        ExcerptConfig(strategy="loudest", num_tries=0)
    for knob in ({"num_tries": 3}, {"lufs_cutoff": -30.0}, {"on_failure": "skip"}, {"scan_max_seconds": 5.0}):
        with pytest.raises(ValueError, match="only applies to strategy='loudest'"):
            ExcerptConfig(strategy="random", **knob)
    with pytest.raises(ValueError, match="start"):
        ExcerptConfig(strategy="start", search="bias_early")
    with pytest.raises(ValueError, match="Unknown search"):
        ExcerptConfig(search="sideways")
    with pytest.raises(ValueError, match="Unknown search"):
        ExcerptConfig(search="audiotree.excerpts.config.no_such_function")
    with pytest.raises(TypeError):
        ExcerptConfig(search=42)
    assert ExcerptConfig(search="audiotree.excerpts.config.search_bias_early").resolved_search is search_bias_early
    assert ExcerptConfig(search=search_uniform).resolved_search is search_uniform
    with pytest.raises(Exception):
        ExcerptConfig().strategy = "start"  # frozen


def test_searches_stay_in_range():
    rng = np.random.default_rng(0)
    for attempt in range(5):
        for search in (search_uniform, search_bias_early):
            x = search(rng, 0.0, 3.0, 20.0, attempt, 5)
            assert 0.0 <= x <= 17.0
    assert search_uniform(rng, 0.0, 3.0, 2.0, 0, 1) == 0.0  # shorter than duration
    late = [search_bias_early(rng, 0.0, 1.0, 100.0, 4, 5) for _ in range(50)]
    assert max(late) <= 1.0


def test_from_file_offsets_padding_and_errors(tmp_path):
    rate = 8000
    data = np.arange(rate * 2, dtype=np.float32)[:, None] / (rate * 2)
    path = tmp_path / "ramp.wav"
    soundfile.write(path, data, rate, subtype="FLOAT")
    t = AudioTree.from_file(path, offset=0.5, duration=0.25)
    np.testing.assert_array_equal(t.waveform[0, 0], data[4000:6000, 0])
    assert t.filepath == [str(path)] and t.offset[0] == 0.5
    tail = AudioTree.from_file(path, offset=1.9, duration=0.25)
    assert tail.samples == 2000 and np.all(tail.waveform[0, 0, 800:] == 0)
    edge = AudioTree.from_file(path, offset=1.9, duration=0.25, pad_mode="edge")
    assert np.all(edge.waveform[0, 0, 800:] == data[-1, 0])
    short = AudioTree.from_file(path, offset=1.9, duration=0.25, pad_mode=None)
    assert short.samples == 800
    with pytest.raises(ValueError, match=r"duration 2\.000 s"):
        AudioTree.from_file(path, offset=2.5, duration=0.25)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="duration"):
            AudioTree.from_file(path, duration=bad)
    with pytest.raises(ValueError, match="pad_mode"):
        AudioTree.from_file(path, duration=0.1, pad_mode="mirror")
    resampled = AudioTree.from_file(path, duration=0.5, sample_rate=16000)
    assert resampled.samples == 8000 and resampled.sample_rate == 16000
    labelled = AudioTree.from_file(path, duration=0.1, pitch=60, velocity=100)
    assert labelled.pitch.dtype == np.float32 and labelled.velocity.dtype == np.int16


def test_same_excerpt_from_wav_and_flac(tmp_path):
    rng = np.random.default_rng(3)
    # Integer samples, so both encoders store exactly the same values.
    data = (rng.standard_normal((48000, 2)) * 6000).astype(np.int16)
    soundfile.write(tmp_path / "a.wav", data, 48000, subtype="PCM_16")
    soundfile.write(tmp_path / "a.flac", data, 48000, subtype="PCM_16")
    a = AudioTree.from_file(tmp_path / "a.wav", offset=0.3217, duration=0.2)
    b = AudioTree.from_file(tmp_path / "a.flac", offset=0.3217, duration=0.2)
    np.testing.assert_array_equal(a.waveform, b.waveform)


def test_start_and_random_strategies(tmp_path):
    path, _ = _sparse_file(tmp_path / "s.wav", seconds=6.0, loud_at=1.0)
    rng = np.random.default_rng(0)
    start = AudioTree.excerpt(path, rng, 1.0, excerpt=ExcerptConfig(strategy="start"))
    assert start.offset[0] == 0.0
    offsets = {float(AudioTree.excerpt(path, np.random.default_rng(i), 1.0).offset[0]) for i in range(5)}
    assert len(offsets) == 5 and all(0 <= o <= 5.0 for o in offsets)
    again = AudioTree.excerpt(path, np.random.default_rng(1), 1.0)
    assert float(again.offset[0]) in offsets  # deterministic for the same rng state
    assert start.lufs is None


@pytest.mark.parametrize("seconds", [24.0, 29.0])
def test_loudest_finds_the_only_loud_passage(tmp_path, seconds):
    path, (lo, hi) = _sparse_file(tmp_path / "sparse.wav", seconds=seconds, loud_at=seconds / 2)
    config = ExcerptConfig(strategy="loudest")  # default num_tries and cutoff
    hits, n = 0, 100
    for i in range(n):
        tree = AudioTree.excerpt(path, np.random.default_rng(i), 3.0, excerpt=config)
        if tree.lufs[0] > config.lufs_cutoff:
            hits += 1
            # The chosen excerpt overlaps the loud passage.
            assert tree.offset[0] + 3.0 > lo and tree.offset[0] < hi
    assert hits / n >= 0.95, hits


def test_loudest_carries_loudness_of_the_returned_excerpt(tmp_path):
    path, _ = _sparse_file(tmp_path / "sparse.wav", seconds=20.0, loud_at=8.0, loud_seconds=6.0, channels=2)
    config = ExcerptConfig(strategy="loudest", lufs_cutoff=-30)
    tree = AudioTree.excerpt(path, np.random.default_rng(0), 2.0, excerpt=config, sample_rate=44100, mono=False)
    assert tree.waveform.shape == (1, 2, 88200) and tree.sample_rate == 44100
    measured = tree.replace_lufs()
    assert abs(float(tree.lufs[0]) - float(measured.lufs[0])) < 0.1
    assert tree.lufs_windows.shape == measured.lufs_windows.shape == (1, 5)
    finite = np.isfinite(measured.lufs_windows)
    np.testing.assert_allclose(tree.lufs_windows[finite], measured.lufs_windows[finite], atol=0.2)
    mono = AudioTree.excerpt(path, np.random.default_rng(0), 2.0, excerpt=config, mono=True)
    assert abs(float(mono.lufs[0]) - float(mono.replace_lufs().lufs[0])) < 0.1


def test_loudest_on_failure_policies(tmp_path):
    path, _ = _sparse_file(tmp_path / "quiet.wav", seconds=6.0, loud_seconds=0.0)
    rng = np.random.default_rng(0)
    keep = AudioTree.excerpt(path, rng, 1.0, excerpt=ExcerptConfig(strategy="loudest", lufs_cutoff=-20))
    assert keep is not None and keep.lufs[0] < -20
    assert AudioTree.excerpt(path, rng, 1.0, excerpt=ExcerptConfig(strategy="loudest", lufs_cutoff=-20, on_failure="skip")) is None
    with pytest.raises(RuntimeError, match="quiet.wav"):
        AudioTree.excerpt(path, rng, 1.0, excerpt=ExcerptConfig(strategy="loudest", lufs_cutoff=-20, on_failure="raise"))
    with pytest.raises(ValueError, match="offset"):
        AudioTree.excerpt(path, rng, 1.0, offset=1.0, excerpt=ExcerptConfig(strategy="loudest"))
    with pytest.raises(ValueError):
        AudioTree.loudest_excerpt(path, rng, ExcerptConfig(strategy="loudest"))  # no duration
    with pytest.raises(ValueError):
        AudioTree.loudest_excerpt(path, rng, ExcerptConfig(), duration=1.0)  # wrong strategy


def test_loudest_on_long_file_seeks(tmp_path):
    # Longer than scan_max_seconds: searched by seek+read, loud throughout the second half.
    path, _ = _sparse_file(tmp_path / "long.wav", seconds=40.0, loud_at=10.0, loud_seconds=30.0)
    config = ExcerptConfig(strategy="loudest", scan_max_seconds=30.0)
    hits = sum(
        AudioTree.excerpt(path, np.random.default_rng(i), 2.0, excerpt=config).lufs[0] > -40 for i in range(20)
    )
    assert hits >= 19


def test_loudest_short_file_is_padded_and_measured_on_real_samples(tmp_path):
    path, _ = _sparse_file(tmp_path / "short.wav", seconds=1.0, loud_at=0.0, loud_seconds=1.0)
    tree = AudioTree.excerpt(path, np.random.default_rng(0), 3.0, excerpt=ExcerptConfig(strategy="loudest"))
    assert tree.samples == 48000 and np.all(tree.waveform[0, 0, 16000:] == 0)
    # Windows over the padding read as silence.
    assert np.isneginf(tree.lufs_windows[0, -1]) and np.isfinite(tree.lufs_windows[0, 0])
    assert tree.lufs[0] > -20


@pytest.mark.parametrize("strategy", ["random", "loudest"])
def test_resampled_excerpts_are_full_length_without_padding(tmp_path, strategy):
    """Every strategy reads the spare native frame resampling needs (no padded last sample)."""
    rate = 44100
    t = np.arange(3 * rate) / rate
    path = tmp_path / "tone.wav"
    soundfile.write(path, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), rate, subtype="FLOAT")
    config = ExcerptConfig(strategy=strategy)
    for pad_mode in ("constant", None):
        tree = AudioTree.excerpt(path, np.random.default_rng(0), 0.3333, excerpt=config, sample_rate=16000, pad_mode=pad_mode)
        assert tree.samples == round(0.3333 * 16000)
        assert abs(float(tree.waveform[0, 0, -1])) > 0 or abs(float(tree.waveform[0, 0, -2])) > 0


def test_non_utf8_file_names_round_trip(tmp_path):
    import os

    raw = os.fsencode(str(tmp_path)) + b"/caf\xe9.wav"  # Latin-1 bytes: not valid UTF-8
    soundfile.write(tmp_path / "plain.wav", np.zeros(1600, np.float32), 16000)
    os.rename(os.fsencode(str(tmp_path / "plain.wav")), raw)
    name = os.fsdecode(raw)
    tree = AudioTree.from_file(name, duration=0.05)
    assert tree.filepath == [name]


def test_the_excerpts_package_is_the_one_home_of_the_strategies():
    import audiotree
    import audiotree.excerpts as excerpts

    assert excerpts.ExcerptConfig is audiotree.ExcerptConfig is audiotree.sources.ExcerptConfig
    assert excerpts.select_clip.__module__ == "audiotree.excerpts.strategies"
    assert excerpts.loudest_clip.__module__ == "audiotree.excerpts.strategies"
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        excerpts.nothing
