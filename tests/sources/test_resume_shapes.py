"""Checkpoints are positions in the global stream: resume with another worker count, exactly.

Every element is tagged with its index in the global stream (``map_with_index``
on the dataset given to ``to_iter_dataset``) and the SHA-1 of its waveform, so
items are told apart even where whole files repeat every epoch at offset 0.
Each test compares the union of what was consumed before the checkpoint and
after the resume with an uninterrupted run without workers: no index twice,
every index the reference run gives, with the same item.
"""

from __future__ import annotations

import hashlib
import json

import grain
import numpy as np
import pytest
from helpers import write_utterances

from audiotree.sources import BucketConfig, batch_by_duration, create_audio_dataset, create_balanced_audio_dataset, scan_durations
from audiotree.sources.global_stream import (
    CheckpointError,
    StreamPosition,
    checkpoint_position,
    merge_checkpoints,
    read_checkpoint,
)


def _tag(index, tree):
    """(stream index, first 4 bytes of the waveform's SHA-1) as arrays, so they batch and go to a device."""
    digest = hashlib.sha1(np.asarray(tree.waveform).tobytes() + str(tree.filepath).encode()).digest()
    return {"index": np.int32(index), "hash": np.frombuffer(digest[:4], np.uint32)[0]}


def _flat(elements) -> list[tuple[int, int]]:
    out = []
    for e in elements:
        out += list(zip(np.atleast_1d(np.asarray(e["index"])).tolist(), np.atleast_1d(np.asarray(e["hash"])).tolist()))
    return out


def _pipeline(items, workers: int, where: str):
    """``items`` (a tagged MapDataset) read with ``workers`` mp_prefetch workers, batches of 3 made ``where``."""
    ds = items.to_iter_dataset()
    opts = grain.MultiprocessingOptions(num_workers=workers)
    if where == "none":
        return ds.mp_prefetch(opts) if workers else ds
    if where == "before":
        ds = ds.batch(3)
        return ds.mp_prefetch(opts) if workers else ds
    return (ds.mp_prefetch(opts) if workers else ds).batch(3)


def _resumed(items, before: int, after: int, where: str, first: int, then: int | None, device: bool = False):
    """Items consumed: ``first`` elements with ``before`` workers, checkpoint (through JSON), then ``then``
    elements (all when None) with ``after`` workers."""
    if device:
        from audiotree.jax import prefetch_to_device

        wrap = (lambda it: prefetch_to_device(it, size=2))
    else:
        wrap = (lambda it: it)
    it = wrap(iter(_pipeline(items, before, where)))
    consumed = [next(it) for _ in range(first)]
    state = json.loads(json.dumps(it.get_state()))
    it.close()
    resumed = wrap(iter(_pipeline(items, after, where)))
    resumed.set_state(state)
    if then is None:
        consumed += list(resumed)
    else:
        consumed += [next(resumed) for _ in range(then)]
    resumed.close()
    return _flat(consumed), state


def _check_union(union, reference, *, complete: bool, slack: int = 0):
    indices = [i for i, _ in union]
    assert len(indices) == len(set(indices)), "an item was served twice"
    by_index = dict(reference)
    assert all(by_index[i] == h for i, h in union), "an index was served with another item"
    ordered = sorted(union)
    if complete:
        assert ordered == sorted(reference)
    else:
        covered = len(ordered) - slack
        assert ordered[:covered] == sorted(reference)[:covered], "an item was skipped"


@pytest.fixture(scope="module")
def files(corpus):
    return [corpus["speech"], corpus["music"]]


def _fixed(files):
    """Fixed-length excerpts, two epochs: whole files repeat, so the tag's index matters."""
    ds = create_audio_dataset(files, duration=0.25, sample_rate=8000, shuffle_seed=3, num_epochs=2)
    return ds.map_with_index(_tag)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["before", "after"])
def test_two_workers_resume_with_one_through_prefetch_to_device(files, where):
    """The issue's case: 2 workers -> 1 worker, through audiotree.jax.prefetch_to_device (was a Grain IndexError)."""
    items = _fixed(files)
    reference = _flat(iter(_pipeline(items, 0, "none")))
    union, state = _resumed(items, 2, 1, where, first=4, then=None, device=True)
    _check_union(union, reference, complete=True)
    assert state["workers"] == 2 and state["audiotree_checkpoint"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("before,after", [(2, 0), (2, 3), (0, 2), (1, 2)])
def test_fixed_length_resumes_with_any_worker_count(files, before, after):
    items = _fixed(files)
    reference = _flat(iter(_pipeline(items, 0, "none")))
    union, _ = _resumed(items, before, after, "before", first=3, then=None)
    _check_union(union, reference, complete=True)


@pytest.mark.slow
def test_balanced_endless_resumes_with_other_workers(corpus):
    items = create_balanced_audio_dataset({"speech": [corpus["speech"]], "music": [corpus["music"]]},
                                          weights={"speech": 3.0, "music": 1.0}, duration=0.25, sample_rate=8000,
                                          shuffle_seed=5).map_with_index(_tag)
    reference = [(i, int(items[i]["hash"])) for i in range(60)]
    union, state = _resumed(items, 2, 3, "after", first=5, then=8)
    assert checkpoint_position(state).count == 15
    _check_union(union, reference, complete=False, slack=3 * 3)


@pytest.fixture(scope="module")
def utterances(tmp_path_factory):
    return write_utterances(tmp_path_factory.mktemp("utterances"), count=16, seed=4, seconds=(0.3, 1.5))


@pytest.mark.slow
@pytest.mark.parametrize("before,after", [(2, 1), (0, 3)])
def test_batch_by_duration_resumes_with_other_workers(utterances, before, after):
    items = create_audio_dataset(filepaths=utterances, duration=None, shuffle=False, sample_rate=8000)
    batches = batch_by_duration(items, scan_durations(utterances), BucketConfig(max_seconds=3.0, buckets=3), num_epochs=2)
    tagged = batches.map_with_index(_tag)
    reference = _flat(iter(_pipeline(tagged, 0, "none")))
    union, _ = _resumed(tagged, before, after, "none", first=3, then=None)
    _check_union(union, reference, complete=True)


# -- checkpoints as data -----------------------------------------------------------------------------

def test_position_arithmetic():
    p = StreamPosition.of([0, 1, 2, 5, 7])
    assert (p.prefix, p.beyond) == (3, (5, 7))
    assert [p.remaining(j) for j in range(4)] == [3, 4, 6, 8]
    # Two more consumed in the remaining stream (indices 3 and 6): everything below 5 is held now.
    q = p.with_consumed(StreamPosition.of([0, 2]))
    assert (q.prefix, q.beyond) == (4, (5, 6, 7))


def test_newer_or_foreign_checkpoints_are_refused_with_the_reason():
    with pytest.raises(CheckpointError, match="format version 7"):
        read_checkpoint({"audiotree_checkpoint": 7, "position": {"prefix": 0}})
    with pytest.raises(CheckpointError, match="raw Grain iterator state"):
        read_checkpoint({"next_index": 4})
    with pytest.raises(CheckpointError, match="merge_checkpoints"):
        checkpoint_position({"audiotree_checkpoint": 1, "host": [1, 2], "position": {"prefix": 3, "beyond": []}})
    with pytest.raises(CheckpointError, match=r"hosts \[0\]"):
        merge_checkpoints([{"audiotree_checkpoint": 1, "host": [0, 2], "position": {"prefix": 3}}])


def test_raw_grain_state_of_another_shape_gets_a_message_not_an_index_error():
    items = grain.MapDataset.range(20)
    from audiotree.sources.audio_datasets import AudioMapDataset

    ds = AudioMapDataset(items, item_bytes=8).to_iter_dataset()
    it = iter(ds)
    # Grain's own state of a 2-worker pipeline (no worker starts before the first element is asked for).
    two_workers = iter(AudioMapDataset(items, item_bytes=8).to_iter_dataset().mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2)))
    raw = two_workers.get_state()["grain"]
    two_workers.close()
    with pytest.raises(CheckpointError, match="Grain states resume only the exact same shape"):
        it.set_state(raw)
    # A raw state of the same shape still resumes, as before.
    it.set_state({"next_index": 5})
    assert int(next(it)) == 5


def test_a_host_checkpoint_given_to_another_host_count_asks_for_a_merge():
    from audiotree.sources import shard_dataset
    from audiotree.sources.audio_datasets import AudioMapDataset

    ds = AudioMapDataset(grain.MapDataset.range(30), item_bytes=8)
    it = iter(shard_dataset(ds, grain.sharding.ShardOptions(0, 2)).to_iter_dataset())
    [next(it) for _ in range(3)]
    state = it.get_state()
    other = iter(shard_dataset(ds, grain.sharding.ShardOptions(0, 3)).to_iter_dataset())
    with pytest.raises(CheckpointError, match="Merge the checkpoints of all 2 hosts"):
        other.set_state(state)


def test_host_checkpoints_merge_and_resume_with_another_host_count():
    """In one process: 2 hosts read unevenly, merge, resume as 3 hosts and as 1; nothing twice, nothing skipped."""
    from audiotree.sources import shard_dataset
    from audiotree.sources.audio_datasets import AudioMapDataset

    ds = AudioMapDataset(grain.MapDataset.range(40), item_bytes=8)
    consumed, states = [], []
    for host, n in ((0, 7), (1, 4)):
        it = iter(shard_dataset(ds, grain.sharding.ShardOptions(host, 2)).to_iter_dataset())
        consumed += [int(next(it)) for _ in range(n)]
        states.append(json.loads(json.dumps(it.get_state())))
    merged = merge_checkpoints(states)
    for count in (3, 1):
        after = []
        for host in range(count):
            it = iter(shard_dataset(ds, grain.sharding.ShardOptions(host, count)).to_iter_dataset())
            it.set_state(merged)
            after += [int(x) for x in it]
        assert sorted(consumed + after) == list(range(40)), count


def test_resumed_hosts_checkpoint_again_and_merge_again():
    """2 hosts -> 3 hosts -> merge -> 1 host: the bases chain, and the union is still the stream's prefix."""
    from audiotree.sources import shard_dataset
    from audiotree.sources.audio_datasets import AudioMapDataset

    ds = AudioMapDataset(grain.MapDataset.range(60), item_bytes=8)

    def host(index, count, state=None):
        it = iter(shard_dataset(ds, grain.sharding.ShardOptions(index, count)).to_iter_dataset())
        if state is not None:
            it.set_state(state)
        return it

    consumed, states = [], []
    for index, n in ((0, 6), (1, 3)):
        it = host(index, 2)
        consumed += [int(next(it)) for _ in range(n)]
        states.append(it.get_state())
    first = merge_checkpoints(states)
    states = []
    for index, n in ((0, 4), (1, 2), (2, 5)):
        it = host(index, 3, first)
        consumed += [int(next(it)) for _ in range(n)]
        states.append(json.loads(json.dumps(it.get_state())))
    second = merge_checkpoints(states)
    assert checkpoint_position(second).count == len(consumed) == len(set(consumed))
    consumed += [int(x) for x in host(0, 1, second)]
    assert sorted(consumed) == list(range(60))
    with pytest.raises(CheckpointError, match="different host counts"):
        merge_checkpoints([states[0], first | {"host": [1, 2], "merged_hosts": None}])


@pytest.mark.slow
def test_a_host_resumes_its_own_checkpoint_with_another_worker_count():
    """Same host share, 0 workers -> 1 worker -> checkpoint -> merged with the other host -> 1 host."""
    from audiotree.sources import shard_dataset
    from audiotree.sources.audio_datasets import AudioMapDataset

    ds = AudioMapDataset(grain.MapDataset.range(48), item_bytes=8)
    share0 = shard_dataset(ds, grain.sharding.ShardOptions(0, 2))
    it = iter(share0.to_iter_dataset().batch(3))
    consumed = [int(x) for _ in range(2) for x in next(it)]
    state = it.get_state()
    it = iter(share0.to_iter_dataset().batch(3).mp_prefetch(grain.MultiprocessingOptions(num_workers=1)))
    it.set_state(state)
    consumed += [int(x) for _ in range(2) for x in next(it)]
    mine = json.loads(json.dumps(it.get_state()))
    it.close()
    other = iter(shard_dataset(ds, grain.sharding.ShardOptions(1, 2)).to_iter_dataset())
    consumed += [int(next(other)) for _ in range(5)]
    rest = iter(ds.to_iter_dataset())
    rest.set_state(merge_checkpoints([mine, other.get_state()]))
    consumed += [int(x) for x in rest]
    assert sorted(consumed) == list(range(48))


def test_host_streams_that_are_not_shares_refuse_another_host_count(corpus):
    """A builder's shard_options shards files per host, and a share batched after shard_dataset is a stream of
    its own: their checkpoints resume on the same host, and are refused (with the reason) on another count."""
    from audiotree.sources import Order, shard_dataset
    from audiotree.sources.audio_datasets import AudioMapDataset

    def by_files(index, count):
        return create_audio_dataset([corpus["speech"]], duration=0.25, sample_rate=8000, num_epochs=1,
                                    order=Order(shard_options=grain.sharding.ShardOptions(index, count)))

    it = iter(by_files(0, 2).to_iter_dataset())
    first = [_tag(0, next(it))["hash"] for _ in range(2)]
    state = it.get_state()
    assert state["global_stream"] is False and state["host"] == [0, 2]
    same = iter(by_files(0, 2).to_iter_dataset())
    same.set_state(state)
    assert _tag(0, next(same))["hash"] == _tag(0, next(it))["hash"] and first
    with pytest.raises(CheckpointError, match="own stream"):
        iter(by_files(0, 3).to_iter_dataset()).set_state(state)
    with pytest.raises(CheckpointError, match="not shares of one global stream"):
        merge_checkpoints([state, state | {"host": [1, 2]}])
    ds = AudioMapDataset(grain.MapDataset.range(20), item_bytes=8)
    batched = shard_dataset(ds, grain.sharding.ShardOptions(0, 2)).batch(2)
    assert batched.host_share is not None and not batched.host_share.placeable
    mapped = shard_dataset(ds, grain.sharding.ShardOptions(0, 2)).map(lambda x: x * 10)
    assert mapped.host_share.placeable and len(mapped.host_share.maps) == 1
