"""audiotree.torch: adapters, collate, epochs, resume and start methods under a real DataLoader."""

from __future__ import annotations

import collections
import itertools
import math
import pickle
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.utils.data  # noqa: E402
from helpers import run_script  # noqa: E402

import audiotree.torch as att  # noqa: E402
from audiotree import AudioTree  # noqa: E402
from audiotree.sources import Corpus, create_audio_dataset, create_balanced_audio_dataset  # noqa: E402

WEIGHTS = {"speech": 0.5, "music": 0.3, "effects": 0.2}
FAST = dict(duration=0.25, sample_rate=8000)


# ------------------------------------------------------------------ helpers
def keys(batch) -> list:
    """(file, offset) of every item of a batch: identifies an excerpt."""
    return list(zip(batch.filepath, np.round(np.asarray(batch.offset), 6).tolist()))


def flat(batches) -> list:
    return [k for b in batches for k in keys(b)]


def item_keys(ds, start, stop) -> list:
    return [k for i in range(start, stop) for k in keys(ds[i])]


@pytest.fixture(scope="module")
def finite(corpus):
    return create_audio_dataset(list(corpus.values()), **FAST)  # 24 files, one epoch


@pytest.fixture(scope="module")
def endless(corpus):
    return create_audio_dataset(list(corpus.values()), num_epochs=None, **FAST)


@pytest.fixture(scope="module")
def reference(endless):
    """Epochs 0 and 1 of the 24 files, read straight from the Grain dataset: ds[0:24], ds[24:48]."""
    return item_keys(endless, 0, 24), item_keys(endless, 24, 48)


@pytest.fixture
def epochs(endless):
    """Map-style, 24 items per epoch. The same items as the one-epoch ``finite`` dataset in epoch 0, and
    the same as it would give in later epochs under Grain's index convention (see the finite test)."""
    return att.TorchMapDataset(endless, epoch_size=24)


def _tree(n=1, seed=0, path="a.wav", source="g"):
    rng = np.random.default_rng(seed)
    return AudioTree.create(
        rng.standard_normal((n, 1, 16)).astype(np.float32), 8000, filepath=[path] * n, source=[source] * n,
        offset=np.arange(n, dtype=np.float64), extras={"label": np.arange(n), "tag": ["x"] * n},
    )


# ------------------------------------------------------------------ import hygiene
@pytest.mark.slow
def test_audiotree_does_not_import_torch():
    code = "import sys, audiotree, audiotree.sources, audiotree.core; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------ collate
def test_collate_batches_trees_into_tensors_and_drops_none():
    batch = att.collate([_tree(seed=0, path="a.wav"), None, _tree(seed=1, path="b.wav")])
    assert isinstance(batch, att.TorchAudioTree) and isinstance(batch, AudioTree)
    assert isinstance(batch.waveform, torch.Tensor) and batch.waveform.shape == (2, 1, 16)
    assert batch.waveform.dtype == torch.float32 and batch.backend == "torch"
    assert batch.filepath == ["a.wav", "b.wav"] and batch.source == ["g", "g"]
    assert isinstance(batch.extras["label"], torch.Tensor) and batch.extras["tag"] == ["x", "x"]
    # Indexing, splitting and moving work on tensors; numpy() goes back.
    assert batch[1].filepath == ["b.wav"] and batch[1].waveform.shape == (1, 1, 16)
    assert batch[np.array([True, False])].filepath == ["a.wav"]
    assert [t.filepath for t in batch.split(2)] == [["a.wav"], ["b.wav"]]
    assert batch.to(torch.float64).waveform.dtype == torch.float64
    back = batch.numpy()
    assert type(back) is AudioTree and isinstance(back.waveform, np.ndarray)
    np.testing.assert_array_equal(back.waveform[1], _tree(seed=1).waveform[0])
    assert "TorchAudioTree" not in repr(batch) and "backend='torch'" in repr(batch)
    # Every item unreadable: nothing to batch.
    assert att.collate([None, None]) is None


def test_collate_dicts_lists_and_plain_tensor_variant():
    items = [{"clean": _tree(seed=i), "noisy": _tree(seed=10 + i), "id": i} for i in range(3)]
    batch = att.collate(items)
    assert batch["clean"].waveform.shape == (3, 1, 16) and isinstance(batch["noisy"], att.TorchAudioTree)
    assert torch.equal(batch["id"], torch.tensor([0, 1, 2]))
    pairs = att.collate([(_tree(seed=i), _tree(seed=i + 1)) for i in range(2)])
    assert isinstance(pairs, tuple) and pairs[1].waveform.shape == (2, 1, 16)
    plain = att.collate_tensors([_tree(seed=0), None, _tree(seed=1, path="b.wav")])
    assert set(plain) == {"sample_rate", "waveform", "extras", "filepath", "source", "offset"}
    assert isinstance(plain["waveform"], torch.Tensor) and plain["waveform"].shape == (2, 1, 16)
    assert plain["filepath"] == ["a.wav", "b.wav"] and plain["offset"].dtype == torch.float64
    assert plain["sample_rate"] == 8000
    # A plain dict is pinned by torch's own pin_memory walk; the tree has a pin_memory() method.
    assert callable(getattr(batch["clean"], "pin_memory"))


def test_unreadable_files_are_dropped_not_fatal(tmp_path, corpus):
    good = sorted(corpus["speech"].iterdir())[:5]
    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"RIFF\x00\x00\x00\x00WAVEjunk")
    ds = create_audio_dataset(filepaths=[*good, bad], shuffle=False, corpus=Corpus(on_read_error="skip"), **FAST)
    batches = list(att.create_dataloader(ds, batch_size=3))
    assert [b.batch_size for b in batches] == [3, 2]
    assert str(bad) not in flat(batches)
    only_bad = create_audio_dataset(filepaths=[bad], corpus=Corpus(on_read_error="skip"), **FAST)
    assert list(att.create_dataloader(only_bad, batch_size=2)) == []  # an all-None batch is skipped


# ------------------------------------------------------------------ adapters
def test_map_adapter_follows_grain_epochs(finite, epochs, reference):
    assert item_keys(finite, 0, 24) == reference[0]  # the finite dataset is epoch 0 of the endless one
    adapter = epochs
    assert len(adapter) == 24
    assert [k for i in range(24) for k in keys(adapter[(0, i)])] == reference[0]
    assert [k for i in range(24) for k in keys(adapter[(1, i)])] == reference[1]
    # Same files in every epoch, new excerpts, no excerpt shared by two indices.
    e0, e1 = reference
    assert sorted(f for f, _ in e0) == sorted(f for f, _ in e1)
    assert len(set(e0)) == 24 and not set(e0) & set(e1)
    # Plain integer keys read the epoch set with set_epoch().
    assert keys(adapter[3]) == [e0[3]]
    adapter.set_epoch(1)
    assert adapter.epoch == 1 and keys(adapter[3]) == [e1[3]] and keys(adapter[-1]) == [e1[-1]]
    with pytest.raises(IndexError):
        adapter[24]
    with pytest.raises(ValueError, match="endless"):
        att.TorchMapDataset(adapter.dataset)


def test_finite_dataset_reads_later_epochs(finite, reference):
    """Epoch 1 of a one-epoch dataset is ds[24:48], by Grain's MapDataset contract."""
    adapter = att.TorchMapDataset(finite)
    got = [k for i in range(24) for k in keys(adapter[(1, i)])]
    assert got == reference[1]


class _Strict:
    """A dataset that refuses indices past its end, unlike Grain's MapDatasets."""

    def __len__(self):
        return 3

    def __getitem__(self, i):
        if not 0 <= i < 3:
            raise IndexError(i)
        return i


def test_refused_epoch_index_explains_the_workaround():
    adapter = att.TorchMapDataset(_Strict())
    assert [adapter[(0, i)] for i in range(3)] == [0, 1, 2]
    with pytest.raises(IndexError, match=r"num_epochs=None\) and pass epoch_size=3"):
        adapter[(1, 0)]


def test_as_torch_dataset_picks_the_adapter(finite, endless):
    assert isinstance(att.as_torch_dataset(finite), att.TorchMapDataset)
    it = att.as_torch_dataset(endless)
    assert isinstance(it, att.TorchIterableDataset) and it.epoch_size is None
    assert att.as_torch_dataset(it) is it
    with pytest.raises(TypeError):
        att.as_torch_dataset(object())


@pytest.mark.filterwarnings("ignore:TorchIterableDataset is reading epoch")
def test_iterable_shards_partition_each_epoch(monkeypatch):
    import grain

    source = grain.MapDataset.range(10_000).repeat()  # endless; item == global index mod 10_000
    adapter = att.TorchIterableDataset(source, epoch_size=23)

    def read(num_workers, epoch):
        adapter.set_epoch(epoch)
        out = []
        for w in range(max(num_workers, 1)):
            info = None if num_workers == 0 else type("Info", (), {"id": w, "num_workers": num_workers})()
            monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda info=info: info)
            shard = list(iter(adapter))
            assert shard == list(range(epoch * 23 + w, (epoch + 1) * 23, max(num_workers, 1)))
            out += shard
        return sorted(out)

    for epoch in (0, 3):
        assert read(0, epoch) == read(2, epoch) == read(4, epoch) == list(range(epoch * 23, epoch * 23 + 23))
    endless = att.TorchIterableDataset(source)
    endless.set_epoch(2)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: None)
    assert list(itertools.islice(iter(endless), 3)) == [(2 * att.ENDLESS_EPOCH_STRIDE + i) % 10_000 for i in range(3)]


def test_epoch_sampler_epochs_shuffle_and_state():
    sampler = att.EpochSampler(6)
    assert list(sampler) == [(0, i) for i in range(6)]
    assert list(sampler) == [(1, i) for i in range(6)]  # every pass is the next epoch
    sampler.set_epoch(7)
    assert {e for e, _ in sampler} == {7}
    fixed = att.EpochSampler(6, advance_epochs=False, epoch=2)
    assert list(fixed) == list(fixed) == [(2, i) for i in range(6)]
    shuffled = att.EpochSampler(50, shuffle=True, shuffle_seed=3)
    a, b = [i for _, i in shuffled], [i for _, i in shuffled]
    assert sorted(a) == sorted(b) == list(range(50)) and a != b
    assert [i for _, i in att.EpochSampler(50, shuffle=True, shuffle_seed=3)] == a  # keyed on (seed, epoch)
    # Mid-epoch state: the next key.
    it = iter(shuffled)
    head = [next(it) for _ in range(20)]
    state = shuffled.state_dict()
    assert (state["epoch"], state["position"]) == (2, 20)
    rest = list(it)
    fresh = att.EpochSampler(50, shuffle=True, shuffle_seed=3)
    fresh.load_state_dict(state)
    assert list(fresh) == rest and head[0][0] == 2
    assert fresh.state_dict()["epoch"] == 3 and fresh.state_dict()["position"] == 0
    with pytest.raises(ValueError, match="seed"):
        att.EpochSampler(50, shuffle=True, shuffle_seed=4).load_state_dict(state)


def test_pickle_round_trip(finite, endless, reference):
    for fn in (att.collate, att.collate_tensors, att.create_dataloader):
        assert pickle.loads(pickle.dumps(fn)) is fn  # module-level: pickled by reference
    sampler = pickle.loads(pickle.dumps(att.EpochSampler(24, shuffle=True, shuffle_seed=1)))
    assert sorted(i for _, i in sampler) == list(range(24))
    adapter = att.TorchMapDataset(endless, epoch_size=24, epoch=1)
    copy = pickle.loads(pickle.dumps(adapter))
    assert copy.epoch == 1 and keys(copy[(0, 5)]) == [reference[0][5]] and keys(copy[5]) == [reference[1][5]]
    stream = att.TorchIterableDataset(endless, epoch_size=24)
    stream_copy = pickle.loads(pickle.dumps(stream))
    assert [keys(x)[0] for x in itertools.islice(iter(stream_copy), 3)] == item_keys(endless, 0, 3)
    batch = att.collate([finite[0], finite[1]])
    again = pickle.loads(pickle.dumps(batch))
    assert torch.equal(again.waveform, batch.waveform) and again.filepath == batch.filepath


# ------------------------------------------------------------------ loader, single process
def test_loader_matches_grain_stream_and_resumes(endless, reference):
    def make():
        return att.create_dataloader(att.TorchMapDataset(endless, epoch_size=24), batch_size=5)

    loader = make()
    assert len(loader) == 5 and loader.epoch == 0
    assert flat(loader) == reference[0]
    assert flat(loader) == reference[1]
    # Mid-epoch checkpoint of epoch 0, restored into a new loader.
    first = make()
    it = iter(first)
    head = [next(it) for _ in range(2)]
    state = first.state_dict()
    assert (state["epoch"], state["position"]) == (0, 10)
    resumed = make()
    resumed.load_state_dict(state)
    assert flat(head) + flat(resumed) == reference[0]
    assert resumed.state_dict()["epoch"] == 1 and flat(resumed) == reference[1]
    # Breaking out of an epoch: the checkpoint keeps the position, the next iteration moves on.
    broken = make()
    for _ in broken:
        break
    assert (broken.state_dict()["epoch"], broken.state_dict()["position"]) == (0, 5)
    assert flat(broken) == reference[1]
    with pytest.raises(ValueError, match="iterable"):
        broken.load_state_dict({"kind": "iterable", "epoch": 0})


def _break_loader(kind, endless, num_workers, context):
    options = dict(num_workers=num_workers)
    if num_workers:
        options["multiprocessing_context"] = context
    if kind == "map":
        return att.create_dataloader(att.TorchMapDataset(endless, epoch_size=24), batch_size=5, **options)
    # 22 items over 2 shards of 11 (batches of 4, 4, 3 each); one shard of 22 without workers.
    return att.create_dataloader(endless, batch_size=4, epoch_size=22, **options)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["map", "iterable"])
# Spawned workers are covered by test_start_methods_in_a_guarded_script; here they would cost minutes.
@pytest.mark.parametrize("num_workers, context", [(0, None), (2, "fork")])
def test_state_after_break_resumes_at_the_next_batch(kind, num_workers, context, endless):
    import json

    uninterrupted_loader = _break_loader(kind, endless, num_workers, context)
    uninterrupted = [keys(b) for _ in range(2) for b in uninterrupted_loader]  # epochs 0 and 1
    del uninterrupted_loader

    loader = _break_loader(kind, endless, num_workers, context)
    consumed = []
    for step, batch in enumerate(loader):  # "train 3 steps, break, save"
        consumed.append(keys(batch))
        if step == 2:
            break
    state = json.loads(json.dumps(loader.state_dict()))  # saved to disk and read back
    assert state["epoch"] == 0
    if kind == "map":
        assert state["position"] == 15
    else:
        assert state["resume"] is not None and sum(state["resume"]["batches"]) == 3
    # A new loader (a new process, in real life) continues at the fourth batch of epoch 0 and into epoch 1.
    resumed = _break_loader(kind, endless, num_workers, context)
    resumed.load_state_dict(state)
    rest = [keys(b) for _ in range(2) for b in resumed]
    assert consumed + rest == uninterrupted
    # The loader that broke out, with its workers still alive, resumes from the same state too.
    loader.load_state_dict(state)
    assert [keys(b) for b in loader] == uninterrupted[3:len(uninterrupted) // 2]


@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_state_after_break_at_the_last_batch_is_the_next_epoch(kind, endless):
    loader = _break_loader(kind, endless, 0, None)
    batches = len(list(_break_loader(kind, endless, 0, None)))
    for step, _ in enumerate(loader):
        if step == batches - 1:
            break
    state = loader.state_dict()
    assert state["epoch"] == 1
    assert state.get("position", 0) == 0 and state.get("resume") is None
    # Breaking before the first batch is consumed leaves the epoch untouched.
    fresh = _break_loader(kind, endless, 0, None)
    iter(fresh)
    assert fresh.state_dict()["epoch"] == 0


def test_iterable_loader_single_process_epochs_and_resume(endless):
    ref = [item_keys(endless, e * 10, e * 10 + 10) for e in range(2)]
    loader = att.create_dataloader(endless, batch_size=4, epoch_size=10)
    assert [flat(loader) for _ in range(2)] == ref
    first = att.create_dataloader(endless, batch_size=4, epoch_size=10)
    it = iter(first)
    head = [next(it)]
    state = first.state_dict()
    resumed = att.create_dataloader(endless, batch_size=4, epoch_size=10)
    resumed.load_state_dict(state)
    assert flat(head) + flat(resumed) == ref[0] and flat(resumed) == ref[1]


def test_iterable_without_set_epoch_warns_on_replay(endless):
    stream = att.TorchIterableDataset(endless, epoch_size=4)
    loader = torch.utils.data.DataLoader(stream, batch_size=2, collate_fn=att.collate)
    first = flat(loader)
    with pytest.warns(UserWarning, match="set_epoch"):
        assert flat(loader) == first
    stream.set_epoch(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert flat(loader) == item_keys(endless, 4, 8)


def test_read_threads_do_not_change_items(endless, reference):
    for threads in (0, 3):
        mapped = att.TorchMapDataset(endless, epoch_size=24, read_threads=threads)
        assert flat(att.create_dataloader(mapped, batch_size=7)) == reference[0], threads
        stream = att.TorchIterableDataset(endless, epoch_size=24, read_threads=threads)
        assert flat(att.create_dataloader(stream, batch_size=7)) == reference[0], threads
    it = iter(att.TorchIterableDataset(endless, epoch_size=24, read_threads=3))
    head = [keys(next(it))[0] for _ in range(2)]  # reads ahead of the consumer
    assert it.state_dict()["consumed"] == 2 and head == reference[0][:2]
    with pytest.raises(ValueError, match="read_threads"):
        att.TorchMapDataset(endless, epoch_size=24, read_threads=-1)
    with pytest.raises(ValueError, match="conflicts"):
        att.create_dataloader(att.TorchMapDataset(endless, epoch_size=24), read_threads=2)


def test_loader_argument_checks(finite, endless):
    with pytest.raises(ValueError, match="shuffle"):
        att.create_dataloader(endless, shuffle=True)
    with pytest.raises(TypeError, match="sampler"):
        att.create_dataloader(finite, sampler=att.EpochSampler(24))
    with pytest.raises(ValueError, match="in_order"):
        att.create_dataloader(finite, in_order=False)
    with pytest.raises(ValueError, match="batch_size"):
        att.create_dataloader(finite, batch_size=0)
    loader = att.create_dataloader(finite, num_workers=2)
    assert loader.persistent_workers and loader.pin_memory == torch.cuda.is_available()
    assert loader.collate_fn is att.collate


# ------------------------------------------------------------------ real workers (fork)
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_map_multiset_and_order_independent_of_worker_count(finite, reference):
    for num_workers in (0, 2, 4):
        loader = att.create_dataloader(
            finite, batch_size=5, num_workers=num_workers, persistent_workers=False,
            multiprocessing_context="fork" if num_workers else None,
        )
        got = flat(loader)
        assert got == reference[0], num_workers  # in-order delivery: even the order matches
        assert len(set(got)) == 24


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:This DataLoader will create 4 worker processes")
def test_iterable_multiset_independent_of_worker_count(endless):
    expected = sorted(item_keys(endless, 0, 24))
    for num_workers in (0, 2, 4):
        stream = att.TorchIterableDataset(endless, epoch_size=24)
        loader = torch.utils.data.DataLoader(
            stream, batch_size=4, num_workers=num_workers, collate_fn=att.collate,
            multiprocessing_context="fork" if num_workers else None,
        )
        got = flat(loader)
        assert sorted(got) == expected and len(set(got)) == 24, num_workers


@pytest.mark.slow
def test_persistent_workers_get_new_excerpts_each_epoch(epochs, endless, reference):
    loader = att.create_dataloader(epochs, batch_size=5, num_workers=2, multiprocessing_context="fork")
    assert loader.persistent_workers
    passes = [flat(loader) for _ in range(2)]
    assert passes == list(reference)
    for got in passes:
        assert len(set(got)) == 24 and len({f for f, _ in got}) == 24  # every file once, no duplicates
    assert not set(passes[0]) & set(passes[1])  # epoch 2 draws new excerpts
    # A plain DataLoader over the iterable adapter: set_epoch reaches the persistent workers.
    stream = att.TorchIterableDataset(endless, epoch_size=12)
    plain = torch.utils.data.DataLoader(
        stream, batch_size=3, num_workers=2, persistent_workers=True, collate_fn=att.collate,
        multiprocessing_context="fork",
    )
    seen = []
    for epoch in range(2):
        stream.set_epoch(epoch)
        seen.append(flat(plain))
    assert [sorted(s) for s in seen] == [sorted(item_keys(endless, e * 12, e * 12 + 12)) for e in range(2)]
    assert not set(seen[0]) & set(seen[1])


@pytest.mark.slow
def test_resume_mid_epoch_with_workers_equals_uninterrupted(endless, reference):
    def make_map():
        return att.create_dataloader(
            att.TorchMapDataset(endless, epoch_size=24), batch_size=5, num_workers=2, multiprocessing_context="fork"
        )

    loader = make_map()
    head = flat(loader)  # epoch 0 complete
    it = iter(loader)
    head += flat([next(it) for _ in range(2)])  # two batches into epoch 1
    state = loader.state_dict()
    assert (state["epoch"], state["position"]) == (1, 10)
    resumed = make_map()
    resumed.load_state_dict(state)
    assert head + flat(resumed) == reference[0] + reference[1]

    # Iterable: 22 items per epoch over 2 workers (shards of 11 -> batches of 4, 4, 3); stop after an
    # odd number of batches so worker 1's shard is due next, and run on into the next epoch.
    def make_iter():
        return att.create_dataloader(endless, batch_size=4, epoch_size=22, num_workers=2, multiprocessing_context="fork")

    full = make_iter()
    uninterrupted = [keys(b) for _ in range(2) for b in full]
    first = make_iter()
    it = iter(first)
    part = [keys(next(it)) for _ in range(3)]
    state = first.state_dict()
    assert state["resume"]["next_role"] == 1 and state["resume"]["batches"] == [2, 1]
    second = make_iter()
    second.load_state_dict(state)
    part += [keys(b) for _ in range(2) for b in second][: len(uninterrupted) - 3]
    assert part == uninterrupted
    # Loading a checkpoint into a loader whose persistent workers are running restarts them.
    it = iter(second)
    next(it)
    second.load_state_dict(state)
    assert [keys(b) for b in second] == uninterrupted[3:6]
    # Another worker count resumes too: one process reads the rest of the epoch (issue #40).
    other = att.create_dataloader(endless, batch_size=4, epoch_size=22, num_workers=0)
    other.load_state_dict(state)
    rest = [keys(b) for b in other]
    assert sorted(k for b in part[:3] + rest for k in b) == sorted(k for b in uninterrupted[:6] for k in b)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")
def test_torchdata_stateful_dataloader_resume(endless, reference):
    stateful = pytest.importorskip("torchdata.stateful_dataloader")
    SDL = stateful.StatefulDataLoader

    def make_map():
        return SDL(att.TorchMapDataset(endless, epoch_size=24), batch_size=5, sampler=att.EpochSampler(24), num_workers=2,
                   collate_fn=att.collate, multiprocessing_context="fork")

    loader = make_map()
    it = iter(loader)
    head = [next(it) for _ in range(2)]
    state = loader.state_dict()
    resumed = make_map()
    resumed.load_state_dict(state)
    assert flat(head) + flat(resumed) == reference[0]
    assert flat(resumed) == reference[1]  # and the sampler moves on to epoch 1

    def make_iter():
        stream = att.TorchIterableDataset(endless, epoch_size=22)
        return SDL(stream, batch_size=4, num_workers=2, collate_fn=att.collate, multiprocessing_context="fork")

    uninterrupted = [keys(b) for b in make_iter()]
    loader = make_iter()
    it = iter(loader)
    part = [keys(next(it)) for _ in range(3)]
    state = loader.state_dict()
    resumed = make_iter()
    resumed.load_state_dict(state)
    assert part + [keys(b) for b in resumed] == uninterrupted


@pytest.mark.slow
def test_balanced_mix_stays_mixed_in_every_batch_with_two_workers(corpus):
    ds = create_balanced_audio_dataset({k: [v] for k, v in corpus.items()}, weights=WEIGHTS, **FAST)
    loader = att.create_dataloader(ds, batch_size=32, num_workers=2, multiprocessing_context="fork")
    counts = [collections.Counter(b.source) for b in itertools.islice(loader, 10)]
    for c in counts:
        assert sum(c.values()) == 32
        for name, w in WEIGHTS.items():
            mean, sd = 32 * w, math.sqrt(32 * w * (1 - w))
            assert abs(c[name] - mean) <= 4.5 * sd, counts
    assert len({tuple(sorted(c.items())) for c in counts}) > 1, counts  # not a fixed pattern


# ------------------------------------------------------------------ spawn and forkserver
_START_METHOD_SCRIPT = textwrap.dedent(
    """
    import sys

    import numpy as np
    import torch.utils.data

    import audiotree.torch as att
    from audiotree.sources import create_audio_dataset


    def keys(batch):
        return list(zip(batch.filepath, np.round(np.asarray(batch.offset), 6).tolist()))


    def want(ds, start, stop):
        return [k for i in range(start, stop) for k in keys(ds[i])]


    def map_style(method, endless, n):
        # Our loader, map-style, persistent workers: epoch 1 is ds[n:2n], delivered in order.
        loader = att.create_dataloader(
            att.TorchMapDataset(endless, epoch_size=n), batch_size=5, num_workers=2, multiprocessing_context=method
        )
        got = [[k for b in loader for k in keys(b)] for _ in range(2)]
        assert got == [want(endless, 0, n), want(endless, n, 2 * n)], "map-style stream differs"
        del loader  # stops the persistent workers


    def plain_iterable(method, endless, n):
        # A plain DataLoader: set_epoch() must reach persistent workers through the shared epoch.
        stream = att.TorchIterableDataset(endless, epoch_size=n)
        plain = torch.utils.data.DataLoader(
            stream, batch_size=2, num_workers=2, persistent_workers=True, collate_fn=att.collate,
            multiprocessing_context=method,
        )
        for epoch in range(2):
            stream.set_epoch(epoch)
            got = sorted(k for b in plain for k in keys(b))
            assert got == sorted(want(endless, epoch * n, epoch * n + n)), f"iterable epoch {epoch} differs"
        del plain


    def our_iterable(method, endless, n):
        loader = att.create_dataloader(endless, batch_size=2, epoch_size=n, num_workers=2, multiprocessing_context=method)
        got = [sorted(k for b in loader for k in keys(b)) for _ in range(2)]
        assert got == [sorted(want(endless, e * n, e * n + n)) for e in range(2)], "iterable loader differs"
        del loader


    if __name__ == "__main__":
        method, parts = METHOD, PARTS
        endless = create_audio_dataset(FOLDERS, duration=0.25, sample_rate=8000, num_epochs=None)
        for part in parts:
            globals()[part](method, endless, 8)
        print("OK", method, parts)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize(
    "method, parts",
    [("spawn", "map_style,plain_iterable"), ("forkserver", "our_iterable")],  # fork: the tests above
)
def test_start_methods_in_a_guarded_script(method, parts, corpus, tmp_path):
    folders = [str(p) for p in corpus.values()]
    code = _START_METHOD_SCRIPT.replace("FOLDERS", repr(folders)).replace("METHOD", repr(method))
    out = run_script(code.replace("PARTS", repr(parts.split(","))), tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"OK {method}" in out.stdout
