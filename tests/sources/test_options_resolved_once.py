"""Options resolved once (issue 38): every option object checks itself when constructed, what depends on
several options is checked before anything is read, and a builder's dataset carries its plan.

Each check that used to live in a builder (``gather_options``, ``check_storage_options``, ``check_common``,
``refuse_index_options``, ``check_on_stale``, a second ``check_pad_mode``, ``isinstance(excerpt, ...)``)
gives the same message as before, now where the bad value is written. Tests that must show "before anything
is read" point the builder at a folder or an index that does not exist: a check that ran after reading would
fail with ``FileNotFoundError`` instead.
"""

from __future__ import annotations

import pickle

import grain
import numpy as np
import pytest
import soundfile as sf

from audiotree.index import build_index
from audiotree.sources import (BucketConfig, Corpus, ExcerptConfig, Order, Output, WindowConfig, batch_by_duration,
                               create_audio_dataset, create_balanced_audio_dataset, create_windowed_audio_dataset,
                               plan_buckets)
from audiotree.sources.datasets.plan import DatasetPlan
from audiotree.sources.epoch_order import EpochShuffledMapDataset

SR = 8000


# ---------------------------------------------------------- the option objects check themselves
@pytest.mark.parametrize("make, error, message", [
    # check_common: rate and seeds
    (lambda: Output(sample_rate=44.1), ValueError, "sample_rate"),
    (lambda: Output(sample_rate=0), ValueError, "sample_rate"),
    (lambda: Order(shuffle_seed=-1), ValueError, "shuffle_seed must be a non-negative int, got -1"),
    (lambda: Order(excerpt_seed=1.5), ValueError, "excerpt_seed must be a non-negative int, got 1.5"),
    (lambda: Corpus(on_read_error="ignore"), ValueError, "on_read_error"),
    # the second check_pad_mode, and measure_lufs
    (lambda: Output(pad_mode="mirror"), ValueError, "pad_mode"),
    (lambda: Output(measure_lufs="yes"), TypeError, "measure_lufs must be True or False"),
    # check_storage_options
    (lambda: Corpus(storage_options=[("anon", True)]), TypeError, "storage_options must be a dict of fsspec"),
    (lambda: Corpus(storage_options={1: True}), TypeError, "storage_options must be a dict of fsspec"),
    # check_on_stale
    (lambda: Corpus(on_stale="error"), ValueError, r"on_stale='error' is now spelled on_stale='raise'"),
    (lambda: Corpus(on_stale="never"), ValueError, "on_stale must be one of"),
    # the shard-options check
    (lambda: Order(shard_options="host 1"), TypeError, "shard_options must be a grain.sharding.ShardOptions"),
    (lambda: Order(shard_options=grain.sharding.ShardOptions(2, 2)), ValueError, "shard_index must be in"),
    # bucketing settings
    (lambda: BucketConfig(max_seconds=0), ValueError, "max_seconds must be a positive"),
    (lambda: BucketConfig(max_seconds=4, buckets=[2.0, 1.0]), ValueError, "strictly increasing"),
    (lambda: BucketConfig(max_seconds=4, too_long="trim"), ValueError, "too_long must be one of"),
    (lambda: BucketConfig(max_seconds=4, weights=[1, 2]), TypeError, "weights must be a"),
])
def test_a_bad_value_is_refused_where_it_is_written(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_checked_objects_keep_their_values_normalised():
    assert Output(sample_rate=16000.0).sample_rate == 16000 and isinstance(Output(sample_rate=16000.0).sample_rate, int)
    options = {"anon": True}
    corpus = Corpus(storage_options=options)
    options["anon"] = False  # the corpus holds its own copy
    assert corpus.storage_options == {"anon": True}
    assert pickle.loads(pickle.dumps(Order(shuffle_seed=3))) == Order(shuffle_seed=3)
    assert BucketConfig(max_seconds=8, buckets=[1, 2]).buckets == (1.0, 2.0)


# ---------------------------------------------------------- what spans options: checked before reading
MISSING = "/nonexistent/audiotree-test-folder"


@pytest.mark.parametrize("call, error, message", [
    # gather_options: objects of the wrong type, loose options of earlier releases
    (lambda: create_audio_dataset(MISSING, output={"sample_rate": 8000}), TypeError,
     r"create_audio_dataset\(\): output must be an audiotree.Output, got dict"),
    (lambda: create_audio_dataset(MISSING, mono=False), TypeError,
     r"create_audio_dataset\(\) takes output=Output\(mono=...\) now, not mono="),
    (lambda: create_windowed_audio_dataset(MISSING, hop=0.5), TypeError,
     r"takes window=WindowConfig\(hop=...\) now, not hop="),
    (lambda: create_audio_dataset(MISSING, sample_rate=8000, output=Output(sample_rate=16000)), ValueError,
     "contradicts output.sample_rate"),
    (lambda: create_audio_dataset(MISSING, corpus=Corpus(group_by="group")), ValueError,
     r"does not use Corpus.group_by"),
    # check_common: epochs
    (lambda: create_audio_dataset(MISSING, num_epochs=0), ValueError, "num_epochs must be >= 1"),
    # isinstance(excerpt, ...)
    (lambda: create_audio_dataset(MISSING, excerpt="loudest"), TypeError, "excerpt must be an ExcerptConfig, got str"),
    (lambda: create_balanced_audio_dataset({"a": MISSING}, excerpt="start"), TypeError,
     "excerpt must be an ExcerptConfig, got str"),
    # refuse_index_options
    (lambda: create_audio_dataset(MISSING, corpus=Corpus(max_duration=5.0)), ValueError,
     r"Corpus\(max_duration\) need Corpus\(index=...\)"),
    (lambda: create_balanced_audio_dataset({"a": MISSING}, corpus=Corpus(labels=["speaker"], where="snr_db > 3")),
     ValueError, r"Corpus\(labels, where\) need Corpus\(index=...\)"),
    (lambda: create_windowed_audio_dataset(MISSING, corpus=Corpus(min_duration=1.0)), ValueError,
     r"Corpus\(min_duration\) need Corpus\(index=...\)"),
    # whole files and durations
    (lambda: create_audio_dataset(MISSING, duration=2.0, excerpt=ExcerptConfig(strategy="full")), ValueError,
     "strategy='full' reads whole files"),
    (lambda: create_audio_dataset(MISSING, duration=None, excerpt=ExcerptConfig(strategy="loudest")), ValueError,
     "strategy='loudest' needs duration="),
])
def test_a_bad_call_is_refused_before_anything_is_read(call, error, message):
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("kwargs, message", [
    (dict(window=WindowConfig(duration=0.5), excerpt=ExcerptConfig(strategy="start")),
     "cannot be combined with a custom excerpt"),
    (dict(window=WindowConfig(duration=0.5), duration=2.0), r"carries its own duration \(0.5 s\)"),
    (dict(window=WindowConfig(duration=0.5), corpus_extra=dict(on_read_error="skip")),
     r"supports only Corpus\(on_read_error='raise'\)"),
    (dict(window="0.5 s"), "window must be a WindowConfig, got str"),
])
def test_window_conflicts_are_checked_before_index_rows_are_loaded(kwargs, message):
    # The index does not exist: loading its rows first would raise FileNotFoundError.
    extra = kwargs.pop("corpus_extra", {})
    corpus = Corpus(index="/nonexistent/corpus.parquet", group_by="group", **extra)
    with pytest.raises((ValueError, TypeError), match=message):
        create_balanced_audio_dataset(corpus=corpus, **kwargs)


# ---------------------------------------------------------- the plan, carried by the dataset
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan_corpus")
    rng = np.random.default_rng(3)
    files = []
    for i in range(12):
        path = root / f"u{i:02d}.wav"
        sf.write(path, (0.1 * rng.standard_normal(int(rng.uniform(0.3, 1.8) * SR))).astype(np.float32), SR)
        files.append(str(path))
    index = str(root / "files.parquet")
    build_index(files, index, executor="serial", show_progress=False, loudness=False)
    return files, index


def test_the_dataset_carries_its_plan_through_per_item_maps(corpus):
    files, index = corpus
    ds = create_audio_dataset(corpus=Corpus(index=index), duration=None, sample_rate=SR, shuffle_seed=5)
    plan = ds.plan
    assert isinstance(plan, DatasetPlan) and plan.sample_rate == SR
    assert isinstance(plan.order, EpochShuffledMapDataset) and plan.items_per_epoch == len(files)
    assert plan.request.order.shuffle_seed == 5 and plan.request.excerpt.strategy == "full"
    assert plan.durations.shape == (len(files),) and np.all(plan.durations > 0.25)
    assert plan.loader.rows is plan.rows
    mapped = ds.map(lambda tree: tree).random_map(lambda tree, rng: tree, seed=1).filter(lambda tree: True)
    assert mapped.plan is plan
    # Steps that move items carry no plan (the items are then read in their own order).
    assert ds.shuffle(seed=1).plan is None and ds[:4].plan is None and ds.repeat(2).plan is None
    balanced = create_balanced_audio_dataset({"a": files[:6], "b": files[6:]}, duration=0.25, sample_rate=SR)
    assert balanced.plan.sample_rate == SR and balanced.plan.order is None and balanced.plan.rows is None
    windows = create_windowed_audio_dataset(filepaths=files, window=WindowConfig(duration=0.25), sample_rate=SR)
    assert windows.plan.request.window.duration == 0.25 and windows.plan.rows is None


def test_batch_by_duration_reads_the_plan_of_a_mapped_chain(corpus):
    _, index = corpus
    items = create_audio_dataset(corpus=Corpus(index=index), duration=None, sample_rate=SR, shuffle_seed=2)
    marked = items.map(lambda tree: tree.replace_extras(mark=np.ones((1,), np.int32)))
    bucketing = BucketConfig(max_seconds=4.0, buckets=2)
    plain = batch_by_duration(items, bucketing=bucketing, num_epochs=1)
    mapped = batch_by_duration(marked, bucketing=bucketing, num_epochs=1)
    assert len(plain) == len(mapped) > 1
    for k in range(len(plain)):
        a, b = plain[k], mapped[k]
        assert list(a.filepath) == list(b.filepath) and np.array_equal(a.waveform, b.waveform)
        assert set(np.asarray(b.extras["mark"]).ravel().tolist()) <= {1, -1}
    # durations came from the plan's index rows, rate from its sample_rate (edges rounded to the hop).
    hop = 160
    rounded = batch_by_duration(marked, bucketing=bucketing, num_epochs=1, pad_multiple=hop)
    assert np.allclose(np.round(rounded.plan.edges * SR) % hop, 0)


def test_a_chain_that_moved_items_gets_a_clear_error(corpus):
    _, index = corpus
    items = create_audio_dataset(corpus=Corpus(index=index), duration=None, sample_rate=SR)
    with pytest.raises(ValueError, match="needs durations= for items not built from a corpus index"):
        batch_by_duration(items[::2], bucketing=BucketConfig(max_seconds=4.0))


@pytest.mark.parametrize("word, value", [("max_seconds", 4.0), ("buckets", 2), ("shuffle", False), ("too_long", "crop"),
                                         ("remainder", "drop"), ("weights", {"a": 1}), ("weight_by", "count")])
def test_bucket_keywords_of_earlier_releases_name_their_new_spelling(word, value):
    with pytest.raises(TypeError, match=rf"batch_by_duration\(\) takes bucketing=BucketConfig\({word}=...\) now"):
        batch_by_duration(grain.MapDataset.range(2), [1.0, 2.0], **{word: value})
    with pytest.raises(TypeError, match=rf"plan_buckets\(\) takes bucketing=BucketConfig\({word}=...\) now"):
        plan_buckets([1.0, 2.0], **{word: value})


def test_storage_options_are_kept_on_one_step_only(corpus):
    import dataclasses

    from audiotree.sources.datasets.windowed import WindowLoader
    from audiotree.sources.indexed import IndexedLoader
    from audiotree.sources.loading import ExcerptLoader, StorageScope, in_storage_scope

    # The loaders take the options from the context (io.storage.use_storage_options), never as a field.
    for loader in (ExcerptLoader, WindowLoader, IndexedLoader):
        assert "storage_options" not in {f.name for f in dataclasses.fields(loader)}
    files, index = corpus
    options = {"default_block_size": 2 ** 16}
    ds = create_audio_dataset(corpus=Corpus(index=index, storage_options=options), duration=0.25, sample_rate=SR)
    assert isinstance(ds.plan.loader, IndexedLoader) and ds[0].waveform.shape == (1, 1, SR // 4)
    scope = in_storage_scope(ds.plan.loader, ds.plan.request.corpus.storage_options)
    assert isinstance(scope, StorageScope) and scope.storage_options == options
    assert in_storage_scope(ds.plan.loader, None) is ds.plan.loader  # no options: no step
