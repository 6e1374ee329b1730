"""torch checkpoints resume with another ``num_workers``: iterable and map-style, fixed-length and planned batches.

Items are tagged with their index in the wrapped dataset and a hash of the
waveform. The union of the items consumed before the checkpoint and after the
resume is compared with an uninterrupted ``num_workers=0`` run: no item twice,
none skipped, each index with the same item.
"""

from __future__ import annotations

import hashlib
import multiprocessing

import numpy as np
import pytest
from helpers import write_utterances

pytest.importorskip("torch")
# Workers start by forkserver: a clean process each (a fork of this threaded pytest process hung).
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create 3 worker processes")

import audiotree.torch as att  # noqa: E402
from audiotree.sources import BucketConfig, batch_by_duration, create_audio_dataset, scan_durations  # noqa: E402

# The forkserver imports torch, Grain, audiotree and pytest once (modules on the interpreter's own path: Python
# 3.11's forkserver does not take pytest's sys.path); each worker it forks starts with them imported instead of
# importing them again (about 3 CPU-s a worker; these tests start some 40). The forkserver is still a fresh
# single-threaded interpreter, not a fork of pytest's threaded process.
multiprocessing.set_forkserver_preload(["numpy", "torch", "grain", "pytest", "audiotree.torch", "audiotree.sources"])


def tag(index, tree):
    """(index, hash of waveform and file): unique even where whole files repeat every epoch at offset 0."""
    return int(index), hashlib.sha1(np.asarray(tree.waveform).tobytes() + str(tree.filepath).encode()).hexdigest()[:12]


def _take(loader, n: int | None) -> list:
    it = iter(loader)
    batches = list(it) if n is None else [next(it) for _ in range(n)]
    return [item for b in batches for item in b]


def _check(union, reference):
    assert len({i for i, _ in union}) == len(union), "an item was served twice"
    assert sorted(union) == sorted(reference), "items were skipped or changed"


@pytest.fixture(scope="module")
def tagged(corpus):
    return create_audio_dataset(list(corpus.values()), num_epochs=None, duration=0.25, sample_rate=8000).map_with_index(tag)


@pytest.mark.slow
@pytest.mark.parametrize("after", [0, 1, 3])
def test_iterable_checkpoint_resumes_with_another_num_workers(tagged, after):
    """2 workers -> 0, 1, 3 (was: "resume it with num_workers=2"); 22 items per epoch, batches of 4."""
    def loader(workers):
        return att.create_dataloader(tagged, batch_size=4, epoch_size=22, num_workers=workers, collate_fn=list,
                                     multiprocessing_context="forkserver" if workers else None)

    reference = [tagged[i] for i in range(22)]
    first = loader(2)
    consumed = _take(first, 3)
    state = first.state_dict()
    resumed = loader(after)
    resumed.load_state_dict(state)
    union = consumed + _take(resumed, None)
    _check(union, reference)
    # The resumed run's own checkpoint is exact again: checkpoint mid-way and resume with 2 workers.
    again = loader(after)
    again.load_state_dict(state)
    part = _take(again, 1)
    second = loader(2)
    second.load_state_dict(again.state_dict())
    _check(consumed + part + _take(second, None), reference)
    # And the next epoch is a full, fresh one.
    assert sorted(_take(second, None)) == sorted(tagged[i] for i in range(22, 44))


@pytest.mark.slow
@pytest.mark.parametrize("after", [0, 3])
def test_map_style_checkpoint_resumes_with_any_num_workers(tagged, after):
    """docs/torch.md's claim: a map-style checkpoint resumes with any worker count."""
    def loader(workers):
        return att.create_dataloader(att.TorchMapDataset(tagged, epoch_size=20), batch_size=3, num_workers=workers,
                                     collate_fn=list, multiprocessing_context="forkserver" if workers else None)

    reference = [tagged[i] for i in range(20)]
    first = loader(2)
    consumed = _take(first, 3)
    resumed = loader(after)
    resumed.load_state_dict(first.state_dict())
    union = consumed + _take(resumed, None)
    _check(union, reference)
    assert union == reference  # map-style keeps the order too


@pytest.fixture(scope="module")
def utterances(tmp_path_factory):
    return write_utterances(tmp_path_factory.mktemp("utterances"), count=12, seed=6, seconds=(0.3, 1.2))


def batch_tag(index, batch):
    return [tag(index, batch)]


@pytest.mark.slow
def test_endless_planned_batches_resume_with_another_num_workers(utterances):
    """batch_by_duration(num_epochs=None) is an endless stream of planned batches: an iterable, resumable
    with any num_workers like any other."""
    items = create_audio_dataset(filepaths=utterances, duration=None, shuffle=False, sample_rate=8000)
    batches = batch_by_duration(items, scan_durations(utterances), BucketConfig(max_seconds=2.0, buckets=2),
                                num_epochs=None)
    tagged = batches.map_with_index(batch_tag)

    def loader(workers):
        return att.create_dataloader(tagged, batch_size=None, epoch_size=12, num_workers=workers, collate_fn=list,
                                     multiprocessing_context="forkserver" if workers else None)

    assert isinstance(loader(0).dataset, att.TorchIterableDataset)
    first = loader(2)
    consumed = _take(first, 5)
    resumed = loader(0)
    resumed.load_state_dict(first.state_dict())
    _check(consumed + _take(resumed, None), [tagged[i][0] for i in range(12)])


def test_a_rank_checkpoint_is_refused_on_another_world_size(tagged):
    """torch checkpoints count one rank's share: another rank or world size is refused, naming both."""
    import grain

    from audiotree.sources import shard_dataset

    def loader(rank, world):
        return att.create_dataloader(shard_dataset(tagged, grain.sharding.ShardOptions(rank, world)), batch_size=2,
                                     epoch_size=6, collate_fn=list)

    first = loader(0, 2)
    consumed = _take(first, 1)
    state = first.state_dict()
    assert state["host"] == [0, 2]
    same = loader(0, 2)
    same.load_state_dict(state)
    assert sorted(consumed + _take(same, None)) == sorted(tagged[2 * k] for k in range(6))
    with pytest.raises(ValueError, match="rank 0 of 2 .* rank 0 of 3.*merge the state_dict\\(\\) of all ranks"):
        loader(0, 3).load_state_dict(state)
    with pytest.raises(ValueError, match="rank 0 of 2 .* rank 1 of 2.*merge_state_dicts"):
        loader(1, 2).load_state_dict(state)


@pytest.fixture(scope="module")
def finite(corpus):
    return create_audio_dataset(list(corpus.values()), num_epochs=1, duration=0.25, sample_rate=8000).map_with_index(tag)


def _rank_loader(ds, kind, rank, world, workers):
    import grain

    from audiotree.sources import shard_dataset

    share = shard_dataset(ds, grain.sharding.ShardOptions(rank, world))
    kwargs = {"epoch_size": 12} if kind == "iterable" else {}
    return att.create_dataloader(share, batch_size=2, num_workers=workers, collate_fn=list,
                                 multiprocessing_context="forkserver" if workers else None, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("after", [1, 3])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["iterable", "map"])
def test_ranks_merge_and_resume_with_another_world_size(tagged, finite, kind, workers, after):
    """2 ranks read unevenly, their state_dicts merge, and 1 or 3 ranks read exactly the rest (was: refused)."""
    import json

    ds = tagged if kind == "iterable" else finite
    consumed, states = [], []
    for rank, batches in ((0, 3), (1, 2)):
        first = _rank_loader(ds, kind, rank, 2, workers)
        consumed += _take(first, batches)
        states.append(json.loads(json.dumps(first.state_dict())))  # a checkpoint is plain data
    merged = att.merge_state_dicts(states)
    rest = []
    for rank in range(after):
        resumed = _rank_loader(ds, kind, rank, after, workers)
        resumed.load_state_dict(merged)
        mine = _take(resumed, None)  # iterable: 12 items per rank; map-style: the rank's whole share of the rest
        assert [i for i, _ in mine] == sorted(i for i, _ in mine) or workers, "a rank reads its share in order"
        rest += mine
    union = consumed + rest
    total = len(finite) if kind == "map" else len(consumed) + 12 * after
    reference = [ds[i] for i in range(total)]
    _check(union, reference)
    assert sorted(union) == reference  # the global stream's prefix, in its order


@pytest.mark.parametrize("kind", ["iterable", "map"])
def test_merged_ranks_checkpoint_again_and_resume(tagged, finite, kind):
    """A rank of the resumed world checkpoints again: the same rank resumes it, and it merges again."""
    ds = tagged if kind == "iterable" else finite
    consumed, states = [], []
    for rank, batches in ((0, 2), (1, 1)):
        first = _rank_loader(ds, kind, rank, 2, 0)
        consumed += _take(first, batches)
        states.append(first.state_dict())
    merged = att.merge_state_dicts(states)
    again, states = [], []
    for rank in range(3):
        resumed = _rank_loader(ds, kind, rank, 3, 0)
        resumed.load_state_dict(merged)
        again += _take(resumed, 1)
        states.append(resumed.state_dict())
    same = _rank_loader(ds, kind, 2, 3, 0)
    same.load_state_dict(states[2])
    going_on = _rank_loader(ds, kind, 2, 3, 0)
    going_on.load_state_dict(merged)
    assert _take(same, 1) == _take(going_on, 2)[2:]  # the resumed rank's next batch
    rest = []
    for rank in range(2):
        resumed = _rank_loader(ds, kind, rank, 2, 0)
        resumed.load_state_dict(att.merge_state_dicts(states))
        rest += _take(resumed, None)
    union = consumed + again + rest
    _check(union, [ds[i] for i in range(len(union))])


@pytest.mark.slow
def test_planned_batch_ranks_merge_and_resume_with_another_world_size(utterances):
    """Endless batch_by_duration batches split with shard_dataset: 2 ranks -> 3, exactly the rest; batches
    split per host by batch_by_duration(shard_options=) are a stream of their own and the merge says so."""
    import grain

    from audiotree.sources import shard_dataset

    items = create_audio_dataset(filepaths=utterances, duration=None, shuffle=False, sample_rate=8000)
    durations = scan_durations(utterances)
    batches = batch_by_duration(items, durations, BucketConfig(max_seconds=2.0, buckets=2), num_epochs=None)
    tagged = batches.map_with_index(batch_tag)

    def loader(rank, world):
        return att.create_dataloader(shard_dataset(tagged, grain.sharding.ShardOptions(rank, world)),
                                     batch_size=None, epoch_size=4, collate_fn=list)

    consumed, states = [], []
    for rank, steps in ((0, 3), (1, 1)):
        first = loader(rank, 2)
        consumed += _take(first, steps)
        states.append(first.state_dict())
    merged = att.merge_state_dicts(states)
    rest = []
    for rank in range(3):
        resumed = loader(rank, 3)
        resumed.load_state_dict(merged)
        rest += _take(resumed, None)
    union = consumed + rest
    assert len(union) == 4 + 12
    _check(union, [tagged[i][0] for i in range(len(union))])

    def own(rank):
        ds = batch_by_duration(items, durations, BucketConfig(max_seconds=4.0, buckets=2), num_epochs=None,
                               shard_options=grain.sharding.ShardOptions(rank, 2))
        return att.create_dataloader(ds, batch_size=None, epoch_size=4, collate_fn=list)

    own_states = []
    for rank in range(2):
        first = own(rank)
        _take(first, 1)
        own_states.append(first.state_dict())
    with pytest.raises(ValueError, match="not shares of one global stream"):
        att.merge_state_dicts(own_states)


def test_rank_checkpoints_that_cannot_be_placed_are_refused_by_the_merge(finite):
    """A finite share past its first pass (later epochs wrap around the share) names what to do instead."""
    states = []
    for rank in range(2):
        loader = _rank_loader(finite, "map", rank, 2, 0)
        _take(loader, None)
        _take(loader, 1)  # into the second epoch
        states.append(loader.state_dict())
    with pytest.raises(ValueError, match="after the first pass of a finite share.*same rank and world size"):
        att.merge_state_dicts(states)
    with pytest.raises(ValueError, match="got none"):
        att.merge_state_dicts([])
