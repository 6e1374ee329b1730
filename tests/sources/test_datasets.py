"""Dataset builders: discovery, determinism, balance, workers, checkpoints, sharding, bad input."""

from __future__ import annotations

import collections
import itertools
import math
import os
import warnings
from pathlib import Path

import grain
import numpy as np
import pytest
import soundfile

from audiotree import AudioTree, ExcerptConfig
from audiotree.errors import AudioReadError
from audiotree.sources import (
    Corpus,
    Output,
    create_audio_dataset,
    create_balanced_audio_dataset,
    find_audio_files,
    shard_dataset,
)

SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _write(path: Path, seconds=1.0, rate=8000, channels=1, seed=0, fmt=None):
    rng = np.random.default_rng(seed)
    data = (rng.standard_normal((int(seconds * rate), channels)) * 0.1).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, data, rate, format=fmt)
    return path


def _key(item):
    return (item.source[0] if item.source else None, item.filepath[0], round(float(item.offset[0]), 6))


# ----------------------------------------------------------------- discovery
def test_find_audio_files_globs_hidden_case(tmp_path):
    _write(tmp_path / "a" / "x.wav")
    _write(tmp_path / "a" / "sub" / "y.WAV")
    _write(tmp_path / "a" / "z.flac", fmt="FLAC")
    _write(tmp_path / "a" / ".hidden.wav")
    _write(tmp_path / "a" / ".git" / "w.wav")
    (tmp_path / "a" / "notes.txt").write_text("hi")
    files = find_audio_files(tmp_path / "a")
    assert [os.path.relpath(f, tmp_path) for f in files] == ["a/sub/y.WAV", "a/x.wav", "a/z.flac"]
    assert find_audio_files(str(tmp_path / "**" / "*.wav")) == [str(tmp_path / "a" / "x.wav")]
    assert find_audio_files([tmp_path / "a", tmp_path / "a" / "x.wav"]) == files  # de-duplicated
    with pytest.warns(UserWarning, match=r"Skipped audio files.*\.flac"):
        only_wav = find_audio_files(tmp_path / "a", extensions=["WAV"])
    assert len(only_wav) == 2
    with pytest.raises(FileNotFoundError, match="nope"):
        find_audio_files(tmp_path / "nope")


def test_default_discovery_finds_every_decodable_format(corpus):
    files = find_audio_files(list(corpus.values()))
    assert {Path(f).suffix for f in files} == {".wav", ".flac", ".mp3", ".ogg"}


# -------------------------------------------------------------- basic items
def test_items_shape_and_provenance(corpus):
    ds = create_audio_dataset(corpus["speech"], duration=0.5, sample_rate=16000, output=Output(source="speech"))
    assert len(ds) == 8
    item = ds[0]
    assert isinstance(item, AudioTree)
    assert item.waveform.shape == (1, 1, 8000) and item.waveform.dtype == np.float32
    assert item.sample_rate == 16000 and item.source == ["speech"]
    assert Path(item.filepath[0]).parent == corpus["speech"]
    stereo = create_audio_dataset(filepaths=[corpus["speech"] / "speech_001.flac"], output=Output(mono=False), duration=0.5)
    assert stereo[0].waveform.shape == (1, 2, 22050)


def test_argument_validation(corpus, tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        create_audio_dataset()
    with pytest.raises(ValueError, match="exactly one"):
        create_audio_dataset(corpus["speech"], filepaths=["x.wav"])
    with pytest.raises(ValueError, match="empty"):
        create_audio_dataset(filepaths=[])
    with pytest.raises(TypeError, match="int or None"):
        create_audio_dataset(corpus["speech"], num_epochs=1.5)
    with pytest.raises(ValueError, match=">= 1"):
        create_audio_dataset(corpus["speech"], num_epochs=0)
    for bad in (0, -1.0):
        with pytest.raises(ValueError, match="duration"):
            create_audio_dataset(corpus["speech"], duration=bad)
        with pytest.raises(ValueError, match="duration"):
            create_balanced_audio_dataset({"a": corpus["speech"]}, duration=bad)
    with pytest.raises(ValueError, match="on_read_error"):
        create_audio_dataset(corpus["speech"], corpus=Corpus(on_read_error="ignore"))
    with pytest.raises(TypeError):
        create_audio_dataset(corpus["speech"], repeat=2)
    (tmp_path / "empty").mkdir()
    with pytest.raises(RuntimeError, match="empty"):
        create_audio_dataset(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="missing_folder"):
        create_audio_dataset(tmp_path / "missing_folder")
    with pytest.raises(FileNotFoundError, match="missing_folder"):
        create_balanced_audio_dataset({"a": [corpus["speech"]], "b": [tmp_path / "missing_folder"]})


def test_balanced_validation(corpus):
    groups = {"speech": [corpus["speech"]], "music": [corpus["music"]]}
    with pytest.raises(ValueError, match="unknown groups"):
        create_balanced_audio_dataset(groups, weights={"speach": 1.0})
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite number > 0"):
            create_balanced_audio_dataset(groups, weights={"speech": bad})
    with pytest.raises(ValueError):
        create_balanced_audio_dataset()
    with pytest.raises(ValueError, match="empty"):
        create_balanced_audio_dataset({})
    with pytest.raises(TypeError, match=r"takes sources=\{group: dataset\}"):
        create_balanced_audio_dataset(groups, datasets={"speech": grain.MapDataset.source([1])})


def test_channel_mismatch_names_the_file(tmp_path):
    _write(tmp_path / "a.wav", channels=2)
    bad = _write(tmp_path / "b.wav", channels=1)
    ds = create_audio_dataset(tmp_path, output=Output(mono=False), shuffle=False, duration=0.1)
    assert ds[0].num_channels == 2
    with pytest.raises(ValueError, match="b.wav"):
        ds[1]
    assert str(bad)


# ------------------------------------------------------------ determinism
def test_determinism_and_seed_semantics(corpus):
    def build(**kw):
        return create_audio_dataset(corpus["music"], duration=0.25, sample_rate=8000, num_epochs=2, **kw)

    a, b = build(shuffle_seed=3), build(shuffle_seed=3)
    assert [_key(a[i]) for i in range(16)] == [_key(b[i]) for i in range(16)]
    np.testing.assert_array_equal(a[5].waveform, b[5].waveform)
    other_excerpts = build(shuffle_seed=3, excerpt_seed=99)
    assert [a[i].filepath for i in range(8)] == [other_excerpts[i].filepath for i in range(8)]
    assert [_key(a[i]) for i in range(8)] != [_key(other_excerpts[i]) for i in range(8)]
    other_order = build(shuffle_seed=4)
    assert [a[i].filepath for i in range(8)] != [other_order[i].filepath for i in range(8)]
    # Seeds that differ only above bit 31 still differ.
    high = build(shuffle_seed=3 + (1 << 40))
    assert [_key(a[i]) for i in range(8)] != [_key(high[i]) for i in range(8)]
    # Each epoch covers every file once, with new offsets for revisited files.
    epoch1 = {a[i].filepath[0]: a[i].offset[0] for i in range(8)}
    epoch2 = {a[i].filepath[0]: a[i].offset[0] for i in range(8, 16)}
    assert set(epoch1) == set(epoch2) and len(epoch1) == 8
    assert any(epoch1[f] != epoch2[f] for f in epoch1)


def test_random_strategy_honours_search(corpus):
    early = ExcerptConfig(search="bias_early")
    assert early.resolved_search.__name__ == "search_bias_early"
    fixed = ExcerptConfig(search=_zero_search)
    ds = create_audio_dataset(corpus["music"], duration=0.25, excerpt=fixed)
    assert all(float(ds[i].offset[0]) == 0.0 for i in range(8))


def _zero_search(rng, offset, duration, total_duration, attempt, max_attempts):
    return 0.0


def test_adding_a_group_keeps_other_streams(corpus):
    base = create_balanced_audio_dataset({"speech": [corpus["speech"]], "music": [corpus["music"]]}, duration=0.25, sample_rate=8000)
    more = create_balanced_audio_dataset(
        {"speech": [corpus["speech"]], "music": [corpus["music"]], "effects": [corpus["effects"]]},
        duration=0.25, sample_rate=8000,
    )

    def speech_stream(ds, n):
        return [_key(ds[i]) for i in range(n) if ds[i].source == ["speech"]][:6]

    assert speech_stream(base, 40) == speech_stream(more, 60)


# --------------------------------------------------------------- balance
def _group_datasets():
    def items(name, n):
        trees = [AudioTree.create(np.zeros((1, 1, 8), np.float32), 8000, filepath=f"{name}{i}") for i in range(n)]
        return grain.MapDataset.source(trees).repeat()

    return {"speech": items("s", 7), "music": items("m", 5), "effects": items("e", 3)}


WEIGHTS = {"speech": 0.5, "music": 0.3, "effects": 0.2}


def test_proportions_over_10k_items():
    ds = create_balanced_audio_dataset(sources=_group_datasets(), weights=WEIGHTS)
    counts = collections.Counter(ds[i].source[0] for i in range(10_000))
    for name, w in WEIGHTS.items():
        assert abs(counts[name] / 10_000 - w) <= 0.01, counts
    # Pre-built items are stamped with their group and filled-in provenance.
    item = ds[0]
    assert item.source[0] in WEIGHTS and np.isnan(item.offset[0])


def _batch_counts(batches):
    return [collections.Counter(b.source) for b in batches]


def _assert_batches_look_random(counts_per_batch, batch_size=32):
    for counts in counts_per_batch:
        for name, w in WEIGHTS.items():
            mean, sd = batch_size * w, math.sqrt(batch_size * w * (1 - w))
            assert abs(counts[name] - mean) <= 4.5 * sd, counts_per_batch
    # Not a fixed pattern: batches differ from one another.
    assert len({tuple(sorted(c.items())) for c in counts_per_batch}) > 1


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.slow
def test_per_batch_balance_in_memory(num_workers):
    ds = create_balanced_audio_dataset(sources=_group_datasets(), weights=WEIGHTS)
    it = ds.to_iter_dataset(SYNC).batch(32, batch_fn=AudioTree.batch)
    if num_workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
    batches = list(itertools.islice(it, 30))
    _assert_batches_look_random(_batch_counts(batches))


@pytest.mark.slow
def test_per_batch_balance_files_two_workers(corpus):
    ds = create_balanced_audio_dataset(
        {k: [v] for k, v in corpus.items()}, weights=WEIGHTS, duration=0.25, sample_rate=8000,
    )
    for read_options in (SYNC, grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)):
        it = ds.to_iter_dataset(read_options).batch(32, batch_fn=AudioTree.batch)
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
        _assert_batches_look_random(_batch_counts(itertools.islice(it, 12)))


# ------------------------------------------------------ workers, checkpoints
@pytest.mark.slow
def test_worker_count_invariance(corpus):
    ds = create_balanced_audio_dataset({k: [v] for k, v in corpus.items()}, duration=0.25, sample_rate=8000)
    single = [_key(x) for x in itertools.islice(ds.to_iter_dataset(SYNC), 60)]
    it = ds.to_iter_dataset(SYNC).mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    multi = [_key(x) for x in itertools.islice(it, 60)]
    assert multi == single  # batching after mp_prefetch sees the same order
    threaded = [_key(x) for x in itertools.islice(ds.to_iter_dataset(grain.ReadOptions(num_threads=3, prefetch_buffer_size=6)), 60)]
    assert threaded == single


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.slow
def test_checkpoint_resume_1000_items(num_workers):
    ds = create_balanced_audio_dataset(sources=_group_datasets(), weights=WEIGHTS)

    def make():
        it = ds.to_iter_dataset(SYNC)
        if num_workers:
            it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
        return iter(it)

    full = [x.filepath[0] for x in itertools.islice(ds.to_iter_dataset(SYNC), 1000)]
    it = make()
    head = [next(it).filepath[0] for _ in range(400)]
    state = it.get_state()
    if num_workers:
        it.close()
    fresh = make()
    fresh.set_state(state)
    tail = [next(fresh).filepath[0] for _ in range(600)]
    if num_workers:
        fresh.close()
    assert head + tail == full


@pytest.mark.slow
def test_checkpoint_resume_with_mp_prefetch(corpus):
    ds = create_audio_dataset(corpus["effects"], duration=0.2, sample_rate=8000, num_epochs=None)

    def make():
        return iter(ds.to_iter_dataset(SYNC).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))

    reference = [_key(x) for x in itertools.islice(ds.to_iter_dataset(SYNC), 120)]
    it = make()
    head = [_key(next(it)) for _ in range(50)]
    state = it.get_state()
    it.close()
    resumed = make()
    resumed.set_state(state)
    tail = [_key(next(resumed)) for _ in range(70)]
    resumed.close()
    assert head + tail == reference


def test_sharding_is_disjoint_and_complete(corpus):
    ds = create_audio_dataset(corpus["music"], duration=0.2, sample_rate=8000, num_epochs=3)
    everything = [_key(ds[i]) for i in range(len(ds))]
    shares = []
    for host in range(3):
        share = shard_dataset(ds, grain.sharding.ShardOptions(shard_index=host, shard_count=3))
        shares.append([_key(share[i]) for i in range(len(share))])
    flat = [k for share in shares for k in share]
    assert sorted(flat) == sorted(everything) and len(set(flat)) == len(flat)
    endless = create_audio_dataset(corpus["music"], duration=0.2, sample_rate=8000, num_epochs=None)
    a = shard_dataset(endless, grain.sharding.ShardOptions(0, 2))
    b = shard_dataset(endless, grain.sharding.ShardOptions(1, 2))
    assert {_key(a[i]) for i in range(10)}.isdisjoint({_key(b[i]) for i in range(10)})
    with pytest.raises(ValueError):
        shard_dataset(ds, grain.sharding.ShardOptions(3, 3))


def test_buffer_memory_warning(corpus):
    ds = create_audio_dataset(corpus["music"], duration=60.0, output=Output(mono=False, channels=2), sample_rate=48000)
    from audiotree.sources import audio_datasets as memory

    ram = memory.physical_memory_bytes()
    huge = grain.ReadOptions(num_threads=1, prefetch_buffer_size=int(ram / (60 * 48000 * 2 * 4)) + 10)
    with pytest.warns(UserWarning, match=r"buffers can hold about [\d.]+ GB"):
        ds.to_iter_dataset(huge)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        it = ds.to_iter_dataset(SYNC).batch(4, batch_fn=AudioTree.batch)
    with pytest.warns(UserWarning, match="workers"):
        it.mp_prefetch(grain.MultiprocessingOptions(num_workers=64, per_worker_buffer_size=400))


# -------------------------------------------------------------- bad input
def _bad_corpus(tmp_path: Path) -> tuple[Path, list[Path]]:
    folder = tmp_path / "mixed"
    good = [_write(folder / f"good{i}.wav", seconds=0.5, seed=i) for i in range(4)]
    (folder / "zero.wav").write_bytes(b"")
    (folder / "text.wav").write_text("this is not audio\n" * 20)
    truncated = _write(tmp_path / "full.flac", seconds=2.0, fmt="FLAC").read_bytes()
    (folder / "truncated.flac").write_bytes(truncated[:200])
    full_wav = _write(tmp_path / "full.wav", seconds=1.0).read_bytes()
    (folder / "truncated.wav").write_bytes(full_wav[: len(full_wav) // 2])
    header = bytearray(_write(tmp_path / "h.wav", seconds=0.5).read_bytes())
    header[0:4] = b"JUNK"
    (folder / "corrupt.wav").write_bytes(bytes(header))
    nan = np.full((4000, 1), np.nan, dtype=np.float32)
    soundfile.write(folder / "nan.wav", nan, 8000, subtype="FLOAT")
    return folder, good


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["warn", "skip"])
def test_bad_files_dropped_under_workers(tmp_path, policy):
    folder, good = _bad_corpus(tmp_path)
    ds = create_audio_dataset(folder, duration=0.25, sample_rate=8000, num_epochs=2, corpus=Corpus(on_read_error=policy))
    it = ds.to_iter_dataset(SYNC).mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    names = sorted(Path(x.filepath[0]).name for x in it)
    assert names == sorted([p.name for p in good] * 2)


def test_bad_files_each_kind_raises_naming_file(tmp_path):
    folder, good = _bad_corpus(tmp_path)
    bad_names = {"zero.wav", "text.wav", "truncated.flac", "truncated.wav", "corrupt.wav", "nan.wav"}
    ds = create_audio_dataset(folder, duration=0.25, sample_rate=8000, shuffle=False)
    seen = set()
    for i in range(len(ds)):
        try:
            ds[i]
        except AudioReadError as exc:
            assert exc.file_path and Path(exc.file_path).name in bad_names
            assert exc.file_path in str(exc)
            seen.add(Path(exc.file_path).name)
    assert seen == bad_names
    with pytest.warns(UserWarning, match="nan.wav"):
        assert create_audio_dataset(filepaths=[folder / "nan.wav"], corpus=Corpus(on_read_error="warn"), duration=0.1)[0] is None


@pytest.mark.slow
def test_worker_error_reaches_parent_with_path(tmp_path):
    folder, _ = _bad_corpus(tmp_path)
    ds = create_audio_dataset(filepaths=[folder / "good0.wav", folder / "corrupt.wav"], duration=0.25, shuffle=False)
    it = iter(ds.to_iter_dataset(SYNC).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    try:
        with pytest.raises(AudioReadError) as info:
            list(it)
        assert info.value.file_path.endswith("corrupt.wav")
        assert "corrupt.wav" in str(info.value)
    finally:
        it.close()  # the workers and their queues go now, not when a collection finds the traceback's cycle


def test_indices_past_len_continue_into_later_epochs(corpus):
    """Grain's MapDataset contract: index len + i is epoch 2's item i (repeat() relies on it)."""
    ds = create_audio_dataset(corpus["music"], duration=0.2, sample_rate=8000, num_epochs=1)
    twice = ds.repeat(2)
    assert len(twice) == 16
    assert {_key(twice[8 + i])[1] for i in range(8)} == {_key(ds[i])[1] for i in range(8)}
    assert _key(ds[8]) == _key(twice[8])


def test_default_read_options_are_sized_for_audio(corpus):
    from audiotree.sources.audio_datasets import DEFAULT_READ_BUFFER_BYTES, default_read_options

    ds = create_audio_dataset(corpus["music"], duration=3.0, sample_rate=48000)
    options = default_read_options(48000 * 3 * 2 * 4)  # a 3 s stereo excerpt
    assert options.num_threads >= 1
    assert options.prefetch_buffer_size * 48000 * 3 * 2 * 4 <= DEFAULT_READ_BUFFER_BYTES
    assert options.prefetch_buffer_size < grain.ReadOptions().prefetch_buffer_size
    tiny = default_read_options(100)
    assert tiny.prefetch_buffer_size == 500  # small items keep Grain's buffer length
    # The default path is used and still yields the dataset's items in order.
    items = list(itertools.islice(ds.to_iter_dataset(), 4))
    assert [_key(x) for x in items] == [_key(ds[i]) for i in range(4)]


@pytest.mark.slow
def test_default_reads_become_synchronous_inside_workers(corpus):
    """Left to us, ReadOptions use threads in one process and none inside mp_prefetch workers."""
    from audiotree.sources.audio_datasets import WORKER_READ_OPTIONS

    ds = create_audio_dataset(corpus["music"], duration=0.2, sample_rate=8000, num_epochs=None)
    it = ds.to_iter_dataset().batch(4, batch_fn=AudioTree.batch)
    rebuilt = it._rebuilt(WORKER_READ_OPTIONS)  # what the workers will run
    assert [b.filepath for b in itertools.islice(rebuilt, 3)] == [b.filepath for b in itertools.islice(it, 3)]
    prefetched = ds.to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=2))
    assert [_key(x) for x in itertools.islice(prefetched, 12)] == [_key(ds[i]) for i in range(12)]
    explicit = ds.to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=4))
    assert explicit._defaulted is False and it._defaulted is True


def test_symlink_loops_list_each_file_once(tmp_path):
    _write(tmp_path / "loop" / "sub" / "0.wav")
    (tmp_path / "loop" / "sub" / "up").symlink_to(tmp_path / "loop")
    (tmp_path / "loop" / "alias").symlink_to(tmp_path / "loop" / "sub")
    files = find_audio_files(tmp_path / "loop")
    assert len(files) == 1 and files[0].endswith("0.wav")


# ------------------------------------------------- transformations keep our type
def _duration_of(t):
    return round(t.waveform.shape[-1] / t.sample_rate, 6)


def test_transformations_of_our_datasets_stay_audiotree_datasets(corpus):
    """Chains built from our datasets keep our to_iter_dataset/mp_prefetch, and their data is Grain's."""
    from audiotree.sources.workers.lifecycle import ClosingIterDataset
    from audiotree.sources.audio_datasets import AudioIterDataset, AudioMapDataset

    ds = create_audio_dataset(corpus["music"], duration=0.2, sample_rate=8000)
    plain = ds.parents[0]  # the same pipeline without our wrapper: Grain's classes only
    assert not isinstance(plain, AudioMapDataset)
    chains = {
        "map": (lambda d: d.map(_key)),
        "map_with_index": (lambda d: d.map_with_index(lambda i, t: (i, _key(t)))),
        "random_map": (lambda d: d.random_map(lambda t, rng: (_key(t), int(rng.integers(1 << 30))), seed=3)),
        "filter": (lambda d: d.filter(lambda t: "1" in t.filepath[0]).map(_key)),
        "shuffle": (lambda d: d.shuffle(seed=5).map(_key)),
        "slice": (lambda d: d.slice(slice(1, 6, 2)).map(_key)),
        "getitem": (lambda d: d[2:5].map(_key)),
        "repeat": (lambda d: d.repeat(2).map(_key)),
        "seed": (lambda d: d.seed(9).random_map(lambda t, rng: int(rng.integers(1 << 30)))),
    }
    for name, chain in chains.items():
        ours, theirs = chain(ds), chain(plain)
        assert isinstance(ours, AudioMapDataset) and ours.item_bytes == ds.item_bytes, name
        assert list(ours) == list(theirs), name
    batched = ds.batch(3, batch_fn=AudioTree.batch)
    assert isinstance(batched, AudioMapDataset) and batched.item_bytes == 3 * ds.item_bytes
    assert [b.filepath for b in batched] == [b.filepath for b in plain.batch(3, batch_fn=AudioTree.batch)]

    it = ds.to_iter_dataset().map(_duration_of).filter(lambda d: d > 0).batch(2)
    assert isinstance(it, AudioIterDataset) and it.element_bytes == 2 * ds.item_bytes
    assert [list(b) for b in it] == [[0.2, 0.2]] * (len(ds) // 2)
    # Rebuilt for the workers (synchronous reads), the same steps replay.
    from audiotree.sources.audio_datasets import WORKER_READ_OPTIONS

    assert [list(b) for b in it._rebuilt(WORKER_READ_OPTIONS)] == [list(b) for b in it]
    assert isinstance(it.mp_prefetch(grain.MultiprocessingOptions(num_workers=0)), ClosingIterDataset)
