"""Windowed sampling: slot arithmetic, coverage, seeking reads, loudness cache and staleness."""

from __future__ import annotations

import collections
import os
import pickle

import numpy as np
import pytest
import soundfile

from audiotree.sources import (
    Corpus,
    Output,
    WindowConfig,
    WindowLufsCache,
    build_window_lufs_cache,
    create_balanced_audio_dataset,
    create_windowed_audio_dataset,
    load_window_lufs,
    precompute_window_lufs,
    save_window_lufs,
    scan_durations,
)
from audiotree.sources.slots import build_slot_index, slot_count

RATE = 4000


def _write(path, seconds, *, rate=RATE, channels=1, seed=0, quiet_until=None):
    rng = np.random.default_rng(seed)
    data = (rng.standard_normal((int(round(seconds * rate)), channels)) * 0.1).astype(np.float32)
    if quiet_until is not None:
        data[: int(quiet_until * rate)] *= 1e-5
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, data, rate, subtype="PCM_16")
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("windowed")
    return {
        "short": _write(root / "a" / "four.wav", 4.0, seed=1),
        "long": _write(root / "a" / "forty.wav", 40.0, seed=2),
        "tiny": _write(root / "b" / "tiny.wav", 0.3, seed=3),
        "stereo": _write(root / "b" / "stereo.wav", 3.0, channels=2, seed=4),
        "root": str(root),
    }


def _key(item):
    return item.filepath[0], round(float(item.offset[0]), 6)


# --------------------------------------------------------------- arithmetic
@pytest.mark.parametrize("alpha, counts", [(0.0, (1, 1)), (0.5, (2, 6)), (1.0, (4, 40))])
def test_slot_counts_follow_alpha(files, alpha, counts):
    assert (slot_count(4.0, 1.0, 1.0, alpha), slot_count(40.0, 1.0, 1.0, alpha)) == counts
    ds = create_windowed_audio_dataset(
        filepaths=[files["short"], files["long"]], window=WindowConfig(duration=1.0, alpha=alpha), sample_rate=RATE, shuffle=False
    )
    assert len(ds) == sum(counts)
    per_file = collections.Counter(ds[i].filepath[0] for i in range(len(ds)))
    assert per_file == {files["short"]: counts[0], files["long"]: counts[1]}


def test_hop_and_short_files():
    assert slot_count(4.0, 1.0, 0.5, 1.0) == 7  # usable 3 s every 0.5 s
    assert slot_count(3.0, 1.0, 0.1, 1.0) == 21  # floor(2 / 0.1) + 1, without float drift
    assert slot_count(0.3, 1.0, 1.0, 1.0) == 1
    slots = build_slot_index(["x", "y"], {"x": 0.3, "y": 5.0}, duration=1.0, hop=1.0, alpha=1.0)
    assert slots.file_idx.tolist() == [0, 1, 1, 1, 1, 1]
    np.testing.assert_allclose(slots.offset, [0.0, 0.0, 0.8, 1.6, 2.4, 3.2])
    np.testing.assert_allclose(slots.stride, [0.0] + [0.8] * 5)
    assert slots.max_offset.tolist() == [0.0] + [4.0] * 5


def test_short_file_gets_one_padded_slot(files):
    ds = create_windowed_audio_dataset(filepaths=[files["tiny"]], window=WindowConfig(duration=1.0), sample_rate=RATE)
    assert len(ds) == 1
    item = ds[0]
    assert item.waveform.shape == (1, 1, RATE) and float(item.offset[0]) == 0.0
    assert not np.any(item.waveform[..., int(0.3 * RATE) + 1 :])


def test_one_epoch_covers_every_slot_once(files):
    paths = [files["short"], files["long"], files["tiny"]]
    ds = create_windowed_audio_dataset(filepaths=paths, window=WindowConfig(duration=1.0, jitter=False), sample_rate=RATE, num_epochs=2, shuffle_seed=5)
    n = 4 + 40 + 1
    assert len(ds) == 2 * n
    first = [_key(ds[i]) for i in range(n)]
    second = [_key(ds[i]) for i in range(n, 2 * n)]
    expected = {(files["short"], float(j) * 0.75) for j in range(4)} | {(files["long"], round(j * 39 / 40, 6)) for j in range(40)}
    expected |= {(files["tiny"], 0.0)}
    assert sorted(first) == sorted(expected) and len(set(first)) == n
    assert sorted(second) == sorted(first) and second != first  # reshuffled per epoch
    # Shuffling interleaves files rather than reading them in order.
    assert [f for f, _ in first[:10]] != [files["long"]] * 10


def test_jittered_offsets_stay_in_range_and_shapes_fixed(files):
    ds = create_windowed_audio_dataset(filepaths=[files["short"], files["stereo"]], window=WindowConfig(duration=1.0), output=Output(mono=False),
                                       sample_rate=RATE, shuffle_seed=3)
    offsets = collections.defaultdict(list)
    for i in range(len(ds)):
        item = ds[i]
        offsets[item.filepath[0]].append(float(item.offset[0]))
        assert item.waveform.shape[-1] == RATE
    assert 0 <= min(offsets[files["short"]]) and max(offsets[files["short"]]) <= 3.0
    assert max(offsets[files["stereo"]]) <= 2.0
    assert len({round(o, 6) for o in offsets[files["short"]]}) == 4
    assert any(abs(o - round(o / 0.75) * 0.75) > 1e-3 for o in offsets[files["short"]])  # jitter moved them


def test_determinism_and_seeds(files):
    paths = [files["short"], files["long"]]

    def keys(**kw):
        ds = create_windowed_audio_dataset(filepaths=paths, window=WindowConfig(duration=1.0), sample_rate=RATE, **kw)
        return [_key(ds[i]) for i in range(len(ds))]

    base = keys(shuffle_seed=1)
    assert keys(shuffle_seed=1) == base
    other_excerpt = keys(shuffle_seed=1, excerpt_seed=9)
    assert [f for f, _ in other_excerpt] == [f for f, _ in base] and other_excerpt != base
    assert [f for f, _ in keys(shuffle_seed=2)] != [f for f, _ in base]


def test_items_are_read_by_seeking(files, monkeypatch):
    from audiotree.io import decode

    requested = []
    real_read = decode.AudioFile.read

    def spy(self, start_frame, num_frames=None):
        requested.append(num_frames)
        return real_read(self, start_frame, num_frames)

    monkeypatch.setattr(decode.AudioFile, "read", spy)
    ds = create_windowed_audio_dataset(filepaths=[files["long"]], window=WindowConfig(duration=0.5), sample_rate=RATE)
    for i in range(0, len(ds), 10):
        ds[i]
    assert requested and all(n is not None and n <= 0.5 * RATE + 1 for n in requested)


def test_loader_pickles(files):
    ds = create_windowed_audio_dataset(filepaths=[files["short"]], window=WindowConfig(duration=1.0, jitter=False), sample_rate=RATE)
    clone = pickle.loads(pickle.dumps(ds))
    assert _key(clone[2]) == _key(ds[2])


def test_argument_validation(files):
    good = [files["short"]]
    with pytest.raises(ValueError, match="duration must be positive"):
        create_windowed_audio_dataset(filepaths=good, window=WindowConfig(duration=0))
    with pytest.raises(ValueError, match="hop must be positive"):
        create_windowed_audio_dataset(filepaths=good, window=WindowConfig(hop=-1))
    with pytest.raises(ValueError, match="alpha"):
        create_windowed_audio_dataset(filepaths=good, window=WindowConfig(alpha=1.5))
    with pytest.raises(ValueError, match="exactly one"):
        create_windowed_audio_dataset(sources=files["root"], filepaths=good)
    with pytest.raises(ValueError, match="exactly one"):
        create_windowed_audio_dataset()
    with pytest.raises(ValueError, match="empty"):
        create_windowed_audio_dataset(filepaths=[])
    with pytest.raises(TypeError, match="num_epochs"):
        create_windowed_audio_dataset(filepaths=good, num_epochs=1.5)
    with pytest.raises(ValueError, match="num_epochs"):
        create_windowed_audio_dataset(filepaths=good, num_epochs=0)
    with pytest.raises(ValueError, match="lufs_window_sec"):
        create_windowed_audio_dataset(filepaths=good, lufs_per_file={files["short"]: np.zeros(4)})
    with pytest.raises(ValueError, match="No duration for"):
        create_windowed_audio_dataset(filepaths=good, durations={"other.wav": 1.0})
    with pytest.raises(ValueError, match="No window loudness for"):
        create_windowed_audio_dataset(filepaths=good, lufs_per_file={"x": np.zeros(1)}, window=WindowConfig(lufs_window_sec=1.0))
    with pytest.raises(RuntimeError, match="lower the cutoff"):
        create_windowed_audio_dataset(filepaths=good, lufs_per_file={files["short"]: np.full(4, -60.0)}, window=WindowConfig(lufs_window_sec=1.0))
    with pytest.raises(TypeError, match="lufs_cache"):
        create_windowed_audio_dataset(filepaths=good, window=WindowConfig(lufs_cache=3))
    with pytest.raises(ValueError, match="pad_mode"):
        create_windowed_audio_dataset(filepaths=good, output=Output(pad_mode="mirror"))
    with pytest.raises(ValueError, match="lufs_cutoff"):
        create_windowed_audio_dataset(filepaths=good, window=WindowConfig(lufs_cutoff=None))
    for kwargs, match in (({"duration": 0}, "duration"), ({"hop": 0}, "hop"), ({"alpha": -0.1}, "alpha"),
                          ({"lufs_window_sec": 0}, "lufs_window_sec"), ({"lufs_cutoff": "loud"}, "lufs_cutoff")):
        with pytest.raises(ValueError, match=match):
            WindowConfig(**kwargs)


def test_sources_discovery(files):
    ds = create_windowed_audio_dataset(sources=os.path.join(files["root"], "a"), window=WindowConfig(duration=1.0, alpha=0), sample_rate=RATE)
    assert len(ds) == 2
    with pytest.raises(RuntimeError, match="No audio files"):
        create_windowed_audio_dataset(sources=files["root"], corpus=Corpus(extensions=[".flac"]))


# ----------------------------------------------------------------- loudness
def test_scan_durations_header_only_with_progress(files, capsys):
    durations = scan_durations([files["short"], files["tiny"]], show_progress=True)
    assert durations == {files["short"]: 4.0, files["tiny"]: 0.3}
    assert "Scanning durations" in capsys.readouterr().err
    scan_durations([files["short"]])
    assert capsys.readouterr().err == ""  # short lists stay quiet


def test_precompute_window_lufs_is_ragged_and_gated(files, tmp_path):
    from audiotree.dsp.loudness import integrated_loudness

    loud = _write(tmp_path / "loud.wav", 5.0, rate=8000, quiet_until=2.0)
    lufs = precompute_window_lufs([loud, files["tiny"], files["stereo"]], 1.0, sample_rate=8000)
    assert lufs[files["tiny"]].shape == (0,) and lufs[files["stereo"]].shape == (3,)
    assert lufs[loud].dtype == np.float32 and lufs[loud].shape == (5,)
    assert np.all(np.isneginf(lufs[loud][:2]))  # below the absolute gate
    data, rate = soundfile.read(loud, dtype="float32")
    for k in range(2, 5):
        assert lufs[loud][k] == pytest.approx(integrated_loudness(data[k * rate : (k + 1) * rate][None], rate), abs=0.1)
    stereo = precompute_window_lufs([files["stereo"]], 1.0, mono=False)[files["stereo"]]
    assert np.all(stereo > lufs[files["stereo"]] + 2)  # two channels sum, mono averages


def test_precompute_refuses_bad_input(files, tmp_path):
    surround = _write(tmp_path / "six.wav", 1.0, channels=6)
    with pytest.raises(ValueError, match="6 channels.*mono=True"):
        precompute_window_lufs([surround], 0.5, mono=False)
    assert precompute_window_lufs([surround], 0.5, mono=True)[surround].shape == (2,)
    with pytest.raises(ValueError, match="shorter than one sample"):
        precompute_window_lufs([files["short"]], 1e-6)
    with pytest.raises(ValueError, match="lufs_window_sec must be positive"):
        precompute_window_lufs([files["short"]], 0)
    with pytest.raises(ValueError, match="sample_rate must be a positive int"):
        save_window_lufs(tmp_path / "c", {"a": np.zeros(1)}, lufs_window_sec=1.0, sample_rate=44.1)
    from audiotree.errors import AudioReadError

    with pytest.raises(AudioReadError, match="missing.wav"):
        scan_durations([tmp_path / "missing.wav"])


def test_loudness_filter_keeps_loud_slots(tmp_path):
    path = _write(tmp_path / "half.wav", 20.0, rate=8000, quiet_until=10.0)
    cache = build_window_lufs_cache([path], 1.0, tmp_path / "cache", sample_rate=8000)
    ds = create_windowed_audio_dataset(filepaths=[path], window=WindowConfig(duration=1.0, lufs_cache=cache, jitter=False), sample_rate=8000)
    offsets = sorted(float(ds[i].offset[0]) for i in range(len(ds)))
    assert len(ds) == 10 and min(offsets) + 0.5 >= 10.0
    unfiltered = create_windowed_audio_dataset(filepaths=[path], window=WindowConfig(duration=1.0, jitter=False), sample_rate=8000)
    assert len(unfiltered) == 20


def test_cache_round_trip_and_overrides(files, tmp_path, capsys):
    paths = [files["short"], files["tiny"]]
    out = build_window_lufs_cache(paths, 1.0, tmp_path / "c", sample_rate=RATE, show_progress=True)
    assert "Measuring window loudness" in capsys.readouterr().err
    cache = load_window_lufs(out)
    assert isinstance(cache, WindowLufsCache) and cache.lufs_window_sec == 1.0 and cache.sample_rate == RATE
    assert cache.durations == {files["short"]: 4.0, files["tiny"]: 0.3}
    assert cache.file_sizes[files["short"]] == os.path.getsize(files["short"])
    assert load_window_lufs(out / "window_lufs.npz").lufs.keys() == cache.lufs.keys()
    for c in (out, cache):
        assert len(create_windowed_audio_dataset(filepaths=paths, window=WindowConfig(duration=1.0, lufs_cache=c), sample_rate=RATE)) == 5
    # Explicit durations override the cache's.
    ds = create_windowed_audio_dataset(filepaths=paths, window=WindowConfig(duration=1.0, lufs_cache=cache), sample_rate=RATE,
                                       durations={files["short"]: 2.0, files["tiny"]: 0.3})
    assert len(ds) == 3
    # Relative and absolute spellings of a path find the same entry.
    rel = os.path.relpath(files["short"])
    assert len(create_windowed_audio_dataset(filepaths=[rel], window=WindowConfig(duration=1.0, lufs_cache=cache), sample_rate=RATE)) == 4
    with pytest.raises(ValueError, match="built for 4000 Hz.*sample_rate=8000"):
        create_windowed_audio_dataset(filepaths=paths, window=WindowConfig(lufs_cache=cache), sample_rate=8000)
    with pytest.raises(ValueError, match="mono=True.*mono=False"):
        create_windowed_audio_dataset(filepaths=paths, window=WindowConfig(lufs_cache=cache), sample_rate=RATE, output=Output(mono=False))
    with pytest.raises(ValueError, match="No duration for .*does not list it; rebuild the cache"):
        create_windowed_audio_dataset(filepaths=[files["long"]], window=WindowConfig(lufs_cache=cache, lufs_window_sec=1.0), sample_rate=RATE,
                                      lufs_per_file={files["long"]: np.zeros(0)})
    with pytest.raises(ValueError, match="durations lacks"):
        save_window_lufs(tmp_path / "d", {"a": np.zeros(1)}, lufs_window_sec=1.0, durations={})


@pytest.mark.parametrize("change", ["size", "mtime"])
def test_stale_cache_is_refused_with_rebuild_hint(tmp_path, change):
    path = _write(tmp_path / "f.wav", 3.0, seed=7)
    other = _write(tmp_path / "g.wav", 3.0, seed=8)
    cache = build_window_lufs_cache([path, other], 1.0, tmp_path / "cache", sample_rate=RATE)
    assert len(create_windowed_audio_dataset(filepaths=[path, other], window=WindowConfig(duration=1.0, lufs_cache=cache), sample_rate=RATE)) == 6
    if change == "size":
        _write(tmp_path / "f.wav", 3.5, seed=7)
    else:
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    with pytest.raises(ValueError, match=r"stale: '.*f\.wav' changed.*build_window_lufs_cache") as info:
        create_windowed_audio_dataset(filepaths=[path, other], window=WindowConfig(duration=1.0, lufs_cache=cache), sample_rate=RATE)
    assert "g.wav" not in str(info.value) and "window_lufs.npz" in str(info.value)
    assert load_window_lufs(cache).stale_files() == [path]
    # Only the files in use are checked.
    assert len(create_windowed_audio_dataset(filepaths=[other], window=WindowConfig(duration=1.0, lufs_cache=cache), sample_rate=RATE)) == 3


# ----------------------------------------------------------------- balanced
def test_balanced_dataset_with_window(files, tmp_path):
    a = os.path.join(files["root"], "a")
    b = os.path.join(files["root"], "b")
    ds = create_balanced_audio_dataset(
        sources={"a": a, "b": b}, window=WindowConfig(duration=0.5, alpha=0.5), sample_rate=RATE, output=Output(mono=True), shuffle_seed=4
    )
    items = [ds[i] for i in range(40)]
    counts = collections.Counter(item.source[0] for item in items)
    assert set(counts) == {"a", "b"} and abs(counts["a"] - counts["b"]) <= 4  # equal weights
    assert all(item.waveform.shape == (1, 1, RATE // 2) for item in items)
    long_share = sum(item.filepath[0] == files["long"] for item in items if item.source[0] == "a")
    assert long_share > 10  # alpha=0.5: the 40 s file has 9 of the group's 11 slots
    assert [_key(x) for x in items] == [_key(ds[i]) for i in range(40)]  # reproducible
    with pytest.raises(ValueError, match=r"window= carries its own duration \(1.0 s\)"):
        create_balanced_audio_dataset(sources={"a": a}, window=WindowConfig(), duration=2.0)
    with pytest.raises(TypeError, match="WindowConfig"):
        create_balanced_audio_dataset(sources={"a": a}, window={"duration": 1.0})
    # A stale cache inside the WindowConfig is refused here too.
    path = _write(tmp_path / "g" / "x.wav", 3.0)
    cache = build_window_lufs_cache([path], 1.0, tmp_path / "cache", sample_rate=RATE)
    ok = create_balanced_audio_dataset(sources={"g": str(tmp_path / "g")}, window=WindowConfig(lufs_cache=cache), sample_rate=RATE)
    assert ok[0].source == ["g"]
    _write(tmp_path / "g" / "x.wav", 2.0)
    with pytest.raises(ValueError, match="stale"):
        create_balanced_audio_dataset(sources={"g": str(tmp_path / "g")}, window=WindowConfig(lufs_cache=cache), sample_rate=RATE)


def test_window_settings_pass_only_as_a_window_config(files):
    paths = [files["short"], files["long"]]
    window = WindowConfig(duration=0.5, hop=0.25, alpha=0.5, jitter=False)
    ds = create_windowed_audio_dataset(filepaths=paths, window=window, sample_rate=RATE, shuffle_seed=4)
    assert len(ds) == slot_count(4.0, 0.5, 0.25, 0.5) + slot_count(40.0, 0.5, 0.25, 0.5)
    assert ds[0].samples == int(0.5 * RATE)
    for knob, value in (("duration", 2.0), ("hop", 0.25), ("alpha", 0.0), ("jitter", False), ("lufs_cutoff", -30.0),
                        ("lufs_window_sec", 0.4), ("lufs_cache", None)):
        with pytest.raises(TypeError, match=rf"takes window=WindowConfig\({knob}=...\) now, not {knob}="):
            create_windowed_audio_dataset(filepaths=paths, sample_rate=RATE, **{knob: value})
    with pytest.raises(TypeError, match="WindowConfig"):
        create_windowed_audio_dataset(filepaths=paths, window={"duration": 1.0}, sample_rate=RATE)
