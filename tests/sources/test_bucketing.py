"""Duration-bucketed batching: the plan (pure, balanced, sharded, validated) and the
Grain dataset that reads it (real files, jit shapes, workers, resume)."""

from __future__ import annotations

import doctest
from collections import Counter

import grain
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import soundfile as sf

from audiotree import AudioTree
from audiotree.sources import BucketConfig, batch_by_duration, create_audio_dataset, plan_buckets, scan_durations
from audiotree.sources.bucketing import FILLER, optimal_bucket_edges

SR = 8000


def _durations(n: int = 2000, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0.5, 20.0, n)


# ------------------------------------------------------------------ plan
def test_every_item_once_per_epoch_and_batches_bounded():
    d = _durations()
    plan = plan_buckets(d, BucketConfig(max_seconds=120, buckets=8), shuffle_seed=3)
    for epoch in (0, 1):
        ep = plan.epoch(epoch)
        slots = np.concatenate(ep.batches)
        real = slots[slots != FILLER]
        assert sorted(real.tolist()) == list(range(d.size))
        for batch, bucket in zip(ep.batches, ep.buckets):
            edge = plan.edges[bucket]
            assert batch.size == plan.batch_sizes[bucket]  # fixed shape per bucket
            assert batch.size * edge <= 120 + 1e-9
            items = batch[batch != FILLER]
            assert np.all(d[items] <= edge + 1e-9)
            # Items are in their own bucket, or are leftovers that rode up from below.
            own = d[items] > (plan.edges[bucket - 1] if bucket else 0) - 1e-9
            assert own.sum() >= items.size - plan.batch_sizes[:bucket].sum()
        partial = [k for b, k in zip(ep.batches, ep.buckets) if (b == FILLER).any()]
        assert len(partial) == len(set(partial))  # at most one partial batch per bucket


def test_plan_is_a_pure_function_of_seed_and_epoch():
    d = _durations()
    a = plan_buckets(d, BucketConfig(max_seconds=100), shuffle_seed=1)
    b = plan_buckets(d, BucketConfig(max_seconds=100), shuffle_seed=1)
    for epoch in (0, 5, 2):  # any order, fresh objects
        assert all(np.array_equal(x, y) for x, y in zip(a.epoch(epoch).batches, b.epoch(epoch).batches))
    assert not all(np.array_equal(x, y) for x, y in zip(a.epoch(0).batches, a.epoch(1).batches))
    c = plan_buckets(d, BucketConfig(max_seconds=100), shuffle_seed=2)
    assert not all(np.array_equal(x, y) for x, y in zip(a.epoch(0).batches, c.epoch(0).batches))
    import pickle

    clone = pickle.loads(pickle.dumps(a))
    assert np.array_equal(clone.batch(12345)[1], a.batch(12345)[1])


def test_default_buckets_reach_ninety_percent_efficiency():
    plan = plan_buckets(_durations(20000), BucketConfig(max_seconds=200), shuffle_seed=0)
    assert plan.describe()["efficiency"] >= 0.90
    assert plan.edges.size == 16 and plan.edges[-1] == pytest.approx(20.0, abs=0.05)


def test_optimal_edges_beat_evenly_spaced_edges():
    d = np.exp(np.random.default_rng(1).normal(1.2, 0.5, 5000)).clip(0.5, 20)
    best = optimal_bucket_edges(d, 6)
    even = np.linspace(d.max() / 6, d.max(), 6)

    def padded(edges):
        return edges[np.searchsorted(edges, d - 1e-9)].sum()

    assert padded(best) < padded(even)
    brute = min(padded(np.array([a, b, d.max()])) for a in np.arange(0.5, 20, 0.25) for b in np.arange(0.75, 20, 0.25)
                if a < b < d.max())
    assert padded(optimal_bucket_edges(d, 3)) <= brute + 1e-6


def test_bad_input_errors():
    d = [1.0, 2.0, 30.0]
    with pytest.raises(ValueError, match="strictly increasing.*edge 2"):
        plan_buckets(d, BucketConfig(max_seconds=60, buckets=[1.0, 5.0, 5.0, 40.0]))
    with pytest.raises(ValueError, match="strictly increasing"):
        plan_buckets(d, BucketConfig(max_seconds=60, buckets=[5.0, 2.0]))
    with pytest.raises(ValueError, match="below the shortest item"):
        plan_buckets(d, BucketConfig(max_seconds=0.5))
    with pytest.raises(ValueError, match=r"Item 2 lasts 30.000 s.*too_long='crop'"):
        plan_buckets(d, BucketConfig(max_seconds=20))
    with pytest.raises(ValueError, match=r"Item 1 \(b.wav\) has duration"):
        plan_buckets({"a.wav": 1.0, "b.wav": float("nan")}, BucketConfig(max_seconds=20))
    with pytest.raises(ValueError, match="longer than max_seconds"):
        plan_buckets(d, BucketConfig(max_seconds=20, buckets=[2.0, 40.0]))
    with pytest.raises(ValueError, match="one group per item"):
        plan_buckets(d, BucketConfig(max_seconds=60), groups=["a"])
    with pytest.raises(ValueError, match="unknown groups"):
        plan_buckets(d, BucketConfig(max_seconds=60, weights={"c": 1}), groups=["a", "a", "b"])
    with pytest.raises(ValueError, match="remainder must be"):
        plan_buckets(d, BucketConfig(max_seconds=60, remainder="spill"))


def test_too_long_crop_and_skip():
    d = [1.0, 2.0, 30.0]
    crop = plan_buckets(d, BucketConfig(max_seconds=20, buckets=[2.0, 10.0], too_long="crop"))
    assert crop.durations[2] == 10.0 and crop.bucket_of.tolist() == [0, 0, 1]
    skip = plan_buckets(d, BucketConfig(max_seconds=20, buckets=[2.0, 10.0], too_long="skip"))
    slots = np.concatenate(skip.epoch(0).batches)
    assert 2 not in slots.tolist() and {0, 1} <= set(slots.tolist())


def test_remainder_policies():
    d = [1.0] * 5
    sizes = {r: sorted(b.size for b in
                       plan_buckets(d, BucketConfig(max_seconds=2, buckets=[1.0], remainder=r)).epoch(0).batches)
             for r in ("pad", "drop", "keep")}
    assert sizes == {"pad": [2, 2, 2], "drop": [2, 2], "keep": [1, 2, 2]}


@pytest.mark.parametrize("weight_by", ["duration", "count"])
def test_groups_keep_their_weights(weight_by):
    rng = np.random.default_rng(0)
    # "long" has few long files, "short" many short ones: weights must hold anyway.
    d = np.concatenate([rng.uniform(8, 12, 100), rng.uniform(0.5, 2, 1000)])
    groups = ["long"] * 100 + ["short"] * 1000
    plan = plan_buckets(d, BucketConfig(max_seconds=60, weights={"long": 1, "short": 3}, weight_by=weight_by),
                        groups=groups)
    totals = Counter()
    for epoch in range(3):
        for batch in plan.epoch(epoch).batches:
            items = batch[batch != FILLER]
            for i in items:
                totals[groups[i]] += d[i] if weight_by == "duration" else 1
    share = totals["short"] / (totals["short"] + totals["long"])
    assert share == pytest.approx(0.75, abs=0.01)
    assert plan.epoch_start(3) == sum(len(plan.epoch(e)) for e in range(3))
    assert plan.locate(plan.epoch_start(2) + 1) == (2, 1)


def test_hosts_split_every_batch_disjointly_with_equal_shapes():
    d = _durations(500)
    plan = plan_buckets(d, BucketConfig(max_seconds=80), num_shards=4)
    assert np.all(plan.batch_sizes % 4 == 0)
    for k in range(len(plan.epoch(0))):
        _, slots, _ = plan.batch(k)
        parts = [plan.shard(slots, i) for i in range(4)]
        assert len({p.size for p in parts}) == 1
        joined = np.concatenate(parts)
        assert sorted(joined.tolist()) == sorted(slots.tolist())
        real = joined[joined != FILLER]
        assert len(set(real.tolist())) == real.size
    with pytest.raises(ValueError, match="unequal batches"):
        plan_buckets(d, BucketConfig(max_seconds=80, remainder="keep"), num_shards=2)


def test_module_doctests():
    import audiotree.sources.bucketing as bucketing
    import audiotree.sources.datasets.duration_batches as duration_batches

    for module in (bucketing, duration_batches):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__


# ------------------------------------------------------------ real files
@pytest.fixture(scope="module")
def utterances(tmp_path_factory):
    """40 speech-like files of 0.3-3 s, WAV and FLAC, at 8 and 16 kHz."""
    root = tmp_path_factory.mktemp("utterances")
    rng = np.random.default_rng(5)
    files = []
    for i in range(40):
        rate = (8000, 16000)[i % 2]
        seconds = float(rng.uniform(0.3, 3.0))
        n = int(seconds * rate)
        envelope = np.minimum(1, np.minimum(np.arange(n), n - np.arange(n)) / (0.02 * rate))
        x = 0.2 * envelope * np.sin(2 * np.pi * rng.uniform(100, 300) * np.arange(n) / rate)
        path = root / f"u{i:02d}.{('wav', 'flac')[i % 3 == 0]}"
        sf.write(path, x.astype(np.float32), rate)
        files.append(str(path))
    return files


def _pipeline(files, bucketing=BucketConfig(max_seconds=8.0, buckets=4), **kw):
    items = create_audio_dataset(filepaths=files, duration=None, shuffle=False, sample_rate=SR)
    options = dict(shuffle_seed=0, num_epochs=2)
    options.update(kw)
    return batch_by_duration(items, scan_durations(files), bucketing, **options)


def test_batches_of_real_files(utterances):
    batches = _pipeline(utterances)
    plan = batches.plan
    edges = set()
    seen = []
    for k in range(plan.batches_in_epoch(0)):
        batch = batches[k]
        _, slots, bucket = plan.batch(k)
        edge_samples = int(np.ceil(plan.edges[bucket] * SR - 1e-6))
        assert batch.waveform.shape == (plan.batch_sizes[bucket], 1, edge_samples)
        edges.add(batch.waveform.shape)
        lengths = batch.lengths
        assert np.all((lengths > 0) == (slots != FILLER))
        names = batch.filepath
        for slot, name, n in zip(slots, names, lengths):
            if slot != FILLER:
                assert name == utterances[slot] and abs(n / SR - plan.durations[slot]) < 0.01
                seen.append(name)
            else:
                assert name == "" and n == 0
        assert np.all(batch.waveform[~np.broadcast_to(batch.mask(), batch.waveform.shape)] == 0)
    assert sorted(seen) == sorted(utterances)
    assert len(edges) <= plan.edges.size
    assert len(batches) == plan.epoch_start(2)


def test_loudness_of_a_batch_is_that_of_each_file(utterances):
    batch = _pipeline(utterances)[0].replace_lufs()
    for name, lufs, n in zip(batch.filepath, batch.lufs, batch.lengths):
        if n:
            alone = AudioTree.from_file(name, sample_rate=SR, mono=True).replace_lufs()
            assert abs(float(alone.lufs[0]) - float(lufs)) < 1e-4, name


def test_jit_compiles_at_most_once_per_bucket(utterances):
    batches = _pipeline(utterances, num_epochs=2)
    traces = []

    @jax.jit
    def step(waveform, mask):
        traces.append(waveform.shape)  # runs only when jit traces a new shape
        return jnp.sum(jnp.where(mask, waveform, 0.0) ** 2) / jnp.maximum(jnp.sum(mask), 1)

    for k in range(len(batches)):
        batch = batches[k]
        step(batch.waveform, batch.mask())
    assert 1 < len(traces) <= batches.plan.edges.size
    assert len(set(traces)) == len(traces)


def test_longest_padding_pads_less(utterances):
    bucket = _pipeline(utterances)
    longest = _pipeline(utterances, pad_to="longest")
    assert longest[0].samples <= bucket[0].samples
    np.testing.assert_array_equal(longest[0].lengths, bucket[0].lengths)


def _stream(ds, workers: int, count: int):
    it = ds.to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=2))
    if workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers, per_worker_buffer_size=1))
    out = []
    iterator = iter(it)
    for _ in range(count):
        batch = next(iterator)
        out.append((batch.filepath, np.asarray(batch.lengths).tolist(), float(np.abs(batch.waveform).sum())))
    return out


@pytest.mark.slow
def test_same_batches_for_any_worker_count(utterances):
    batches = _pipeline(utterances, num_epochs=None)
    n = batches.plan.batches_in_epoch(0) + 3  # crosses into epoch 1
    serial = _stream(batches, 0, n)
    assert _stream(batches, 2, n) == serial
    assert serial[: n - 3] != serial[n - 3 :] or n < 6


def test_get_state_set_state_resumes_at_the_next_batch(utterances):
    batches = _pipeline(utterances, num_epochs=None)
    it = iter(batches.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))
    for _ in range(5):
        next(it)
    state = it.get_state()
    expected = [next(it).filepath for _ in range(4)]
    fresh = iter(_pipeline(utterances, num_epochs=None).to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))
    fresh.set_state(state)
    assert [next(fresh).filepath for _ in range(4)] == expected


def test_hosts_read_disjoint_halves(utterances):
    halves = [
        _pipeline(utterances, shard_options=grain.sharding.ShardOptions(shard_index=i, shard_count=2))
        for i in range(2)
    ]
    whole_plan = plan_buckets(scan_durations(utterances), BucketConfig(max_seconds=8.0, buckets=4), shuffle_seed=0,
                              num_shards=2)
    for k in range(whole_plan.batches_in_epoch(0)):
        a, b = halves[0][k], halves[1][k]
        assert a.waveform.shape == b.waveform.shape
        names = [x for x in a.filepath + b.filepath if x]
        assert len(names) == len(set(names))
        assert sorted(names) == sorted(utterances[i] for i in whole_plan.batch(k)[1] if i != FILLER)


def test_groups_are_stamped_as_source(utterances):
    groups = ["even" if i % 2 == 0 else "odd" for i in range(len(utterances))]
    batch = _pipeline(utterances, BucketConfig(max_seconds=8.0, buckets=4, weights={"even": 1, "odd": 1}), groups=groups)[0]
    for name, source in zip(batch.filepath, batch.source):
        if name:
            assert source == groups[utterances.index(name)]


def test_items_that_do_not_match_the_durations(utterances):
    items = create_audio_dataset(filepaths=utterances, duration=None, shuffle=False, sample_rate=SR)
    durations = list(scan_durations(utterances).values())
    with pytest.raises(ValueError, match="40 elements but 39 durations"):
        batch_by_duration(items, durations[:-1], BucketConfig(max_seconds=8.0))
    # A shuffle under something that is not a per-item map cannot be undone: refused.
    shuffled = create_audio_dataset(filepaths=utterances, duration=None, shuffle=True, sample_rate=SR)
    with pytest.raises(ValueError, match="shuffle=False"):
        batch_by_duration(shuffled[:40], durations, BucketConfig(max_seconds=8.0))
    endless = create_audio_dataset(filepaths=utterances, duration=None, shuffle=False).repeat()
    with pytest.raises(ValueError, match="endless"):
        batch_by_duration(endless, durations, BucketConfig(max_seconds=8.0))
    with pytest.raises(ValueError, match="needs durations= for items not built from a corpus index"):
        batch_by_duration(items, bucketing=BucketConfig(max_seconds=8.0))
    stale = batch_by_duration(items, [0.31] * len(utterances), BucketConfig(max_seconds=8.0, buckets=[0.31]))
    with pytest.raises(ValueError, match="durations are stale"):
        stale[0]


def test_crop_policy_reads_the_first_seconds(utterances):
    durations = scan_durations(utterances)
    items = create_audio_dataset(filepaths=utterances, duration=None, shuffle=False, sample_rate=SR)
    batches = batch_by_duration(items, durations, BucketConfig(max_seconds=4.0, buckets=[1.0, 2.0], too_long="crop"))
    for k in range(batches.plan.batches_in_epoch(0)):
        batch = batches[k]
        assert batch.samples <= 2 * SR and np.all(batch.lengths <= 2 * SR)


# ------------------------------------------------------------ scheduled group weights (#40)
def test_group_weights_may_follow_a_schedule_of_batches():
    from audiotree.sources import WeightSchedule

    d = [1.0] * 60 + [1.0] * 60
    groups = ["x"] * 60 + ["y"] * 60
    schedule = WeightSchedule({0: {"x": 9, "y": 1}, 30: {"x": 1, "y": 9}}, interpolation="step")
    plan = plan_buckets(d, BucketConfig(max_seconds=10, buckets=[1.0], weights=schedule, weight_by="count"),
                        groups=groups)
    static = plan_buckets(d, BucketConfig(max_seconds=10, buckets=[1.0], weights={"x": 9, "y": 1}, weight_by="count"),
                          groups=groups)
    assert [b.tolist() for b in plan.epoch(0).batches] == [b.tolist() for b in static.epoch(0).batches]

    def y_share(epoch):
        items = np.concatenate(plan.epoch(epoch).batches)
        items = items[items != FILLER]
        return float(np.mean(np.asarray(groups)[items] == "y"))

    assert y_share(0) == pytest.approx(0.1, abs=0.02)
    starts = [plan.epoch_start(e) for e in range(6)]
    switched = next(e for e in range(6) if starts[e] >= 30)  # the first epoch starting at or after batch 30
    assert all(y_share(e) == pytest.approx(0.1, abs=0.02) for e in range(switched))
    assert all(y_share(e) == pytest.approx(0.9, abs=0.02) for e in range(switched, 6))
    # Pure: a fresh plan locates a late batch without having planned the earlier epochs in order.
    again = plan_buckets(d, BucketConfig(max_seconds=10, buckets=[1.0], weights=schedule, weight_by="count"),
                         groups=groups)
    assert again.batch(starts[5] + 1)[1].tolist() == plan.batch(starts[5] + 1)[1].tolist()
    with pytest.raises(ValueError, match=r"missing \['y'\]"):
        plan_buckets(d, BucketConfig(max_seconds=10, weights=WeightSchedule({0: {"x": 1, "z": 1}})), groups=groups)


def test_batch_by_duration_takes_a_schedule(utterances):
    from audiotree.sources import WeightSchedule

    groups = ["even" if i % 2 == 0 else "odd" for i in range(len(utterances))]
    schedule = WeightSchedule({0: {"even": 1, "odd": 0}, 1: {"even": 0, "odd": 1}}, interpolation="step")
    batches = _pipeline(utterances, BucketConfig(max_seconds=8.0, buckets=4, weights=schedule), groups=groups,
                        num_epochs=2)
    first = batches.plan.epoch_start(1)
    epoch0 = {s for k in range(first) for s in batches[k].filepath if s}
    epoch1 = {s for k in range(first, len(batches)) for s in batches[k].filepath if s}
    assert epoch0 and epoch0 <= set(utterances[0::2])
    assert epoch1 and epoch1 <= set(utterances[1::2])
