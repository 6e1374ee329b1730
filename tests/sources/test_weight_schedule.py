"""Scheduled mixtures (#40): WeightSchedule, scheduled balanced datasets, resume, realised proportions."""

from __future__ import annotations

import functools
import hashlib
import itertools
import pickle
import shutil
import subprocess
import sys

import grain
import numpy as np
import pytest

from audiotree.sources import WeightSchedule, create_balanced_audio_dataset, realised_proportions
from audiotree.sources.mixing import ShuffledProportionalSelection
from conftest import require_tool

SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
RAMP = {0: {"a": 0.9, "b": 0.1}, 1000: {"a": 0.1, "b": 0.9}}


def _ramp_weights(index: int, *, length: int) -> dict:
    """A module-level (picklable) callable schedule: the same ramp as RAMP."""
    t = min(max(index / length, 0.0), 1.0)
    return {"a": 0.9 - 0.8 * t, "b": 0.1 + 0.8 * t}


@pytest.fixture(scope="module")
def groups(tmp_path_factory):
    """Two groups of three sox-written tones each (distinct frequencies, so every excerpt differs)."""
    require_tool(shutil.which("sox") is not None, "sox", "it writes the test tones")
    root = tmp_path_factory.mktemp("schedule")
    out = {}
    for g, name in enumerate(("a", "b")):
        folder = root / name
        folder.mkdir()
        for k in range(3):
            freq = 200 + 150 * (3 * g + k)
            subprocess.run(["sox", "-n", "-r", "8000", "-c", "1", "-b", "16", str(folder / f"{k}.wav"),
                            "synth", "2", "sine", str(freq), "vol", "0.5"], check=True)
        out[name] = str(folder)
    return out


def _key(item):
    """An item's identity: group, file, offset and the bytes of its audio."""
    digest = hashlib.sha1(np.asarray(item.waveform).tobytes()).hexdigest()[:16]
    return (item.source[0], item.filepath[0], round(float(item.offset[0]), 6), digest)


# ------------------------------------------------------------ the schedule itself
def test_linear_and_step_values():
    linear = WeightSchedule(RAMP)
    assert linear(0) == {"a": 0.9, "b": 0.1}
    assert linear(250) == {"a": 0.7, "b": 0.3}
    assert linear(5000) == {"a": 0.1, "b": 0.9}
    step = WeightSchedule({0: {"a": 3, "b": 1}, 100: {"a": 1, "b": 3}}, interpolation="step")
    assert step(99) == {"a": 0.75, "b": 0.25} and step(100) == {"a": 0.25, "b": 0.75}
    # The mean over a span is exact: over the whole ramp it is the midpoint.
    assert np.allclose(linear.mean(0, 1000), [0.5004, 0.4996])


def test_schedule_is_picklable_and_pure():
    for schedule in (WeightSchedule(RAMP), WeightSchedule(functools.partial(_ramp_weights, length=1000))):
        copy = pickle.loads(pickle.dumps(schedule))
        assert [copy(i) for i in (0, 437, 999, 10**9)] == [schedule(i) for i in (0, 437, 999, 10**9)]


@pytest.mark.parametrize("points, match", [
    ({-1: {"a": 1}}, "ints >= 0"),
    ({0.5: {"a": 1}}, "ints >= 0"),
    ({10: {"a": 1, "b": 1}, 5: {"a": 1, "b": 1}}, "5 comes after 10"),
    ({0: {"a": 1, "b": 1}, 10: {"a": 1, "c": 1}}, r"point 10 .*missing \['b'\], unknown \['c'\]"),
    ({0: {"a": 1, "b": -0.5}}, "point 0: the weight of group 'b' must be a finite number >= 0"),
    ({0: {"a": 1, "b": float("nan")}}, "group 'b'"),
    ({0: {"a": 0, "b": 0}}, "point 0: the weights sum to 0"),
    ({0: {}}, "non-empty"),
])
def test_bad_points_are_refused_naming_the_entry(points, match):
    with pytest.raises(ValueError, match=match):
        WeightSchedule(points)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="interpolation"):
        WeightSchedule(RAMP, interpolation="cubic")
    with pytest.raises(TypeError, match="WeightSchedule takes"):
        WeightSchedule({})
    with pytest.raises(ValueError, match="too small for 2 groups"):
        WeightSchedule(RAMP, block_size=4)
    with pytest.raises(ValueError, match="weights at item 0"):
        WeightSchedule(lambda i: {"a": -1.0})
    with pytest.raises(ValueError, match="same groups"):
        WeightSchedule(RAMP).then(100, {0: {"a": 1, "c": 1}})


# ------------------------------------------------------------ the scheduled mix
def test_scheduled_selection_follows_the_schedule_per_block():
    schedule = WeightSchedule(RAMP)
    sel = ShuffledProportionalSelection([sys.maxsize] * 2, schedule, seed=5, names=["a", "b"])
    block = schedule.block_size
    labels = np.array([sel[i][0] for i in range(20 * block)])
    running = np.cumsum(labels == 1)
    for b in range(1, 21):  # the running count of "b" stays within one item of the schedule's running sum
        assert abs(running[b * block - 1] - schedule.mean(0, b * block)[1] * b * block) <= 1.0


def test_a_group_is_consumed_in_its_own_order_under_a_schedule():
    sel = ShuffledProportionalSelection([sys.maxsize] * 2, WeightSchedule(RAMP), seed=1, names=["b", "a"])
    picks = [sel[i] for i in range(3000)]
    for g in (0, 1):
        inner = [j for group, j in picks if group == g]
        assert inner == list(range(len(inner)))
    # Far positions are a lookup past the last key: the same answer in a fresh (unpickled) copy.
    copy = pickle.loads(pickle.dumps(sel))
    assert copy[10**12] == sel[10**12] and copy[2500] == picks[2500]


def test_weight_zero_serves_no_item_and_finite_groups_end_the_mix():
    schedule = WeightSchedule({0: {"a": 1, "b": 0}, 640: {"a": 0, "b": 1}}, interpolation="step")
    sel = ShuffledProportionalSelection([sys.maxsize, sys.maxsize], schedule, seed=0, names=["a", "b"])
    labels = np.array([sel[i][0] for i in range(1280)])
    assert labels[:640].tolist() == [0] * 640 and labels[640:].tolist() == [1] * 640
    # "a" is finite (100 items) and weighs 0 from item 640 on: it never runs out, the mix stays endless.
    assert len(ShuffledProportionalSelection([700, sys.maxsize], schedule, seed=0, names=["a", "b"])) == sys.maxsize
    finite = ShuffledProportionalSelection([300, 100], WeightSchedule(RAMP), seed=0, names=["a", "b"])
    used = [finite[i] for i in range(len(finite))]
    assert max(j for g, j in used if g == 0) <= 299 and max(j for g, j in used if g == 1) <= 99
    assert max(j for g, j in used if g == 0) == 299 or max(j for g, j in used if g == 1) == 99


def test_then_keeps_the_items_before_the_step():
    old = WeightSchedule(RAMP)
    new = old.then(437, {0: {"a": 1, "b": 1}})
    a = ShuffledProportionalSelection([sys.maxsize] * 2, old, seed=2, names=["a", "b"])
    b = ShuffledProportionalSelection([sys.maxsize] * 2, new, seed=2, names=["a", "b"])
    switch = -(-437 // old.block_size) * old.block_size  # the first block boundary at or after the step
    assert [a[i] for i in range(switch)] == [b[i] for i in range(switch)]
    assert np.allclose(new.mean(switch, switch + 1000), [0.5, 0.5])
    tail = np.array([b[i][0] for i in range(switch, switch + 2000)])
    assert abs((tail == 1).mean() - 0.5) < 0.02


# ------------------------------------------------------------ datasets and the test
def test_balanced_dataset_refuses_a_schedule_that_misses_a_group(groups):
    with pytest.raises(ValueError, match=r"missing \['b'\]"):
        create_balanced_audio_dataset(groups, weights=WeightSchedule({0: {"a": 1, "c": 1}}),
                                      duration=0.05, sample_rate=8000)


@pytest.mark.parametrize("weights", [
    WeightSchedule(RAMP),
    # A callable is evaluated once per block; a ramp over 1,000 items needs blocks well under 100 items.
    WeightSchedule(functools.partial(_ramp_weights, length=1000), block_size=32),
], ids=["points", "callable"])
def test_realised_proportions_follow_a_linear_ramp(groups, weights):
    """Weights 0.9/0.1 -> 0.1/0.9 over 1,000 items: every 100-item window within 3 binomial SDs."""
    ds = create_balanced_audio_dataset(groups, weights=weights, duration=0.05, sample_rate=8000, shuffle_seed=11)
    report = realised_proportions(ds, 1000, window=100)
    assert report.names == ["a", "b"] and report.starts == list(range(0, 1000, 100))
    served = np.array([ds[i].source[0] == "b" for i in range(1000)])  # what the items themselves say
    for k, start in enumerate(report.starts):
        share = served[start:start + 100].mean()
        assert share == pytest.approx(report.realised[k, 1])
        expected = WeightSchedule(RAMP).mean(start, start + 100)[1]
        assert report.expected[k, 1] == pytest.approx(expected, abs=0.01)
        assert abs(share - expected) <= 3 * np.sqrt(expected * (1 - expected) / 100), (start, share, expected)
    assert report.worst_deviation() <= 3
    assert report.to_dict()["windows"][0]["expected"]["a"] == pytest.approx(report.expected[0, 0])


@pytest.mark.slow
def test_resume_at_item_437_with_two_workers_continues_the_same_stream(groups):
    """Checkpoint after 437 items under mp_prefetch(2), resume: the union is the uninterrupted stream.

    (2 -> 3 workers waits for the elastic resume of #40's "one global stream"; this is 2 -> 2.)
    """
    ds = create_balanced_audio_dataset(groups, weights=WeightSchedule(RAMP), duration=0.05, sample_rate=8000,
                                       shuffle_seed=4)
    reference = [_key(x) for x in itertools.islice(ds.to_iter_dataset(SYNC), 600)]

    def make():
        return iter(ds.to_iter_dataset(SYNC).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))

    it = make()
    head = [_key(next(it)) for _ in range(437)]
    state = it.get_state()
    it.close()
    resumed = make()
    resumed.set_state(state)
    tail = [_key(next(resumed)) for _ in range(163)]
    resumed.close()
    assert head + tail == reference
    assert [k[0] for k in reference] == [ds[i].source[0] for i in range(600)]


def test_resume_with_a_new_schedule_from_a_step(groups):
    """A run checkpointed at item 437 goes on with new weights: the items before the switch do not change."""
    old = WeightSchedule(RAMP)
    before = create_balanced_audio_dataset(groups, weights=old, duration=0.05, sample_rate=8000, shuffle_seed=4)
    after = create_balanced_audio_dataset(groups, weights=old.then(437, {0: {"a": 1, "b": 3}}), duration=0.05,
                                          sample_rate=8000, shuffle_seed=4)
    it = iter(before.to_iter_dataset(SYNC))
    head = [_key(next(it)) for _ in range(437)]
    state = it.get_state()
    resumed = iter(after.to_iter_dataset(SYNC))
    resumed.set_state(state)
    tail = [_key(next(resumed)) for _ in range(2000)]
    assert head == [_key(after[i]) for i in range(437)]
    switch = 448  # 437 rounded up to a 64-item block
    assert tail[:switch - 437] == [_key(before[i]) for i in range(437, switch)]
    report = realised_proportions(after, switch + 1600, window=1600, start=switch)
    assert report.expected[0].tolist() == pytest.approx([0.25, 0.75])
    assert report.worst_deviation() <= 3
    assert np.mean([k[0] == "b" for k in tail[switch - 437:]]) == pytest.approx(0.75, abs=0.03)


def _only_b_after_100(index: int) -> dict:
    return {"a": 1.0 if index < 100 else 0.0, "b": 1.0}


def test_block_means_match_the_exact_mean_of_every_block():
    ramp = WeightSchedule({0: {"a": 0.9, "b": 0.1}, 1000: {"a": 0.1, "b": 0.9}, 1500: {"a": 1, "b": 0}},
                          block_size=48)
    switched = WeightSchedule(RAMP, "step", block_size=48).then(700, {0: {"a": 1, "b": 3}, 2000: {"a": 3, "b": 1}})
    called = WeightSchedule(functools.partial(_ramp_weights, length=1000), block_size=16)
    for schedule in (ramp, switched, called):
        size = schedule.block_size
        exact = np.stack([schedule.mean(b * size, (b + 1) * size) for b in range(100)])
        np.testing.assert_allclose(schedule.block_means(0, size, 100), exact, atol=1e-12)


def test_a_callable_schedule_with_a_group_that_never_ends_is_refused_clearly(monkeypatch):
    from audiotree.sources import mixing

    monkeypatch.setattr(mixing, "_MAX_SCAN_BLOCKS", 1024)  # the search's bound, lowered to keep the test quick
    schedule = WeightSchedule(_only_b_after_100, block_size=16)
    with pytest.raises(ValueError, match="does not run out .* callable schedule; make every group endless"):
        ShuffledProportionalSelection([1000, sys.maxsize], schedule, seed=0, names=["a", "b"])
    finite = ShuffledProportionalSelection([1000, 500], schedule, seed=0, names=["a", "b"])
    assert 500 <= len(finite) < 700  # "b" runs out


@pytest.mark.slow
def test_a_scheduled_mix_reads_the_same_through_torch_spawned_workers(groups):
    torch = pytest.importorskip("torch")
    from audiotree.torch import TorchMapDataset, collate

    ds = create_balanced_audio_dataset(groups, weights=WeightSchedule(RAMP), duration=0.05, sample_rate=8000)
    loader = torch.utils.data.DataLoader(TorchMapDataset(ds, epoch_size=300), batch_size=25, num_workers=2,
                                         collate_fn=collate, multiprocessing_context="spawn")
    served = [source for batch in loader for source in batch.source]
    assert served == [ds[i].source[0] for i in range(300)]
