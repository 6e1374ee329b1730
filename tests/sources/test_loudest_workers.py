"""Index-backed ``loudest`` across worker processes: Grain ``mp_prefetch`` and torch ``DataLoader``.

A worker gets the dataset pickled (the plan and the profile readings with it)
and draws each item from the item's own RNG, so 2 workers must deliver exactly
the items of ``ds[i]`` in-process: same file, offset, samples, ``lufs`` and
``excerpt_method``, every one above the cutoff, and a checkpoint taken after a
few items resumes at the next one.
"""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import grain
import numpy as np
import pytest
import soundfile

from audiotree import AudioTree, ExcerptConfig
from audiotree.excerpts.plan import EXCERPT_METHODS
from audiotree.index import build_index
from audiotree.sources import Corpus, create_audio_dataset
from helpers import run_script
from test_loudest import write_sparse

RATE = 8000
DURATION = 3.0
CUTOFF = ExcerptConfig().lufs_cutoff
N = 24  # items compared per case
SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
# skip_silent: the silent file is left out at start-up, so every item must clear the cutoff.
LOUDEST = ExcerptConfig(strategy="loudest", skip_silent=True)


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> Path:
    """Three sparse 40 s files (FLAC, WAV, Ogg) with one 2.5 s event each, one silent FLAC, their index."""
    root = tmp_path_factory.mktemp("loudest_workers")
    folder = root / "files"
    folder.mkdir()
    for seed, ext in enumerate(("flac", "wav", "ogg")):
        write_sparse(folder / f"sparse{seed}.{ext}", 40, DURATION - 0.5, seed=seed)
    rng = np.random.default_rng(9)
    soundfile.write(folder / "silent.flac", (0.001 * rng.standard_normal(RATE * 40)).astype(np.float32), RATE)
    out = root / "ix.parquet"
    build_index(folder, out, executor="serial", show_progress=False)
    return out


def _dataset(index: Path):
    return create_audio_dataset(corpus=Corpus(index=index), num_epochs=None, shuffle=True, sample_rate=RATE, duration=DURATION,
                                excerpt=LOUDEST)


def _key(tree: AudioTree, k: int = 0) -> tuple:
    """What identifies item ``k`` of a batch: file, offset, lufs, method, and a digest of its samples."""
    return (Path(tree.filepath[k]).name, round(float(tree.offset[k]), 6), float(tree.lufs[k]),
            int(tree.extras["excerpt_method"][k]), float(np.asarray(tree.waveform[k], np.float64).sum()))


def _keys(batches) -> list:
    return [_key(b, k) for b in batches for k in range(b.batch_size)]


@pytest.fixture(scope="module")
def reference(index) -> list:
    """``ds[0:N]`` in this process (0 workers)."""
    ds = _dataset(index)
    keys = [_key(ds[i]) for i in range(N)]
    assert all(name != "silent.flac" for name, *_ in keys)
    assert all(lufs > CUTOFF for _, _, lufs, _, _ in keys)
    assert {EXCERPT_METHODS[m] for *_, m, _ in keys} == {"index"}
    assert len({(name, offset) for name, offset, *_ in keys}) > N // 2  # draws spread, not one window
    return keys


def _grain_batches(ds, num_workers: int):
    # Batched after mp_prefetch, which interleaves the workers' shards back into ds order.
    it = ds.to_iter_dataset(SYNC)
    if num_workers:
        it = it.mp_prefetch(grain.MultiprocessingOptions(num_workers=num_workers))
    return iter(it.batch(4, batch_fn=AudioTree.batch))


@pytest.mark.slow
def test_grain_two_workers_same_items_and_exact_resume(index, reference):
    ds = _dataset(index)
    it = _grain_batches(ds, 0)
    assert _keys(itertools.islice(it, N // 4)) == reference  # 0 workers, batched: ds[i] in order

    # One 2-worker iterator gives the whole run, its state taken after 2 batches (taking it changes nothing it
    # gives); restored into a fresh 2-worker iterator, the next batch is batch 3.
    it = _grain_batches(ds, 2)
    head = [next(it) for _ in range(2)]
    state = it.get_state()
    got = head + [next(it) for _ in range(N // 4 - 2)]
    it.close()
    assert _keys(got) == reference
    assert all(b.lufs.shape == (4,) and np.all(np.asarray(b.lufs) > CUTOFF) for b in got)

    fresh = _grain_batches(ds, 2)
    fresh.set_state(state)
    tail = [next(fresh) for _ in range(N // 4 - 2)]
    fresh.close()
    assert _keys(head) + _keys(tail) == reference


_TORCH_SCRIPT = textwrap.dedent(
    """
    import audiotree.torch as att
    from audiotree import ExcerptConfig
    from audiotree.sources import Corpus, create_audio_dataset

    CUTOFF = ExcerptConfig().lufs_cutoff


    def keys(batch):
        return [(batch.filepath[k].rsplit("/", 1)[-1], round(float(batch.offset[k]), 6), float(batch.lufs[k]),
                 int(batch.extras["excerpt_method"][k]), float(batch.waveform[k].double().sum()))
                for k in range(len(batch.filepath))]


    def make(ds, n, method):
        return att.create_dataloader(att.TorchMapDataset(ds, epoch_size=n), batch_size=4, num_workers=2,
                                     multiprocessing_context=method)


    if __name__ == "__main__":
        params = __PARAMS__
        method, n = params["method"], params["n"]
        ds = create_audio_dataset(corpus=Corpus(index=params["index"]), num_epochs=None, shuffle=True, sample_rate=8000, duration=3.0,
                                  excerpt=ExcerptConfig(strategy="loudest", skip_silent=True))
        want = [k for i in range(n) for k in keys(att.collate([ds[i]]))]
        assert want == [tuple(k) for k in params["reference"]], "0-worker items differ from the test's"
        # One loader gives the whole epoch, its checkpoint taken after 2 batches (taking it changes nothing it
        # gives); a new loader (new workers) resumes at the third.
        loader = make(ds, n, method)
        it = iter(loader)
        head = [k for _ in range(2) for k in keys(next(it))]
        state = loader.state_dict()
        got = head + [k for b in it for k in keys(b)]
        assert got == want, "2-worker items differ from ds[i]"
        assert all(lufs > CUTOFF for _, _, lufs, _, _ in got), "an item below the cutoff"
        del it, loader  # stops the persistent workers
        resumed = make(ds, n, method)
        resumed.load_state_dict(state)
        rest = [k for b in resumed for k in keys(b)]
        assert head + rest == want, "resumed items differ"
        del resumed
        print("OK", method)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_torch_dataloader_two_workers_same_items_and_exact_resume(method, index, reference, tmp_path):
    params = dict(method=method, n=N, index=str(index), reference=reference)
    code = _TORCH_SCRIPT.replace("__PARAMS__", repr(params))
    out = run_script(code, tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"OK {method}" in out.stdout
