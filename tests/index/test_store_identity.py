"""The column store's identity (issue 36): a dataset reads the exact store generation it was planned on,
a store belongs to the index's content (not its size and time), and every damaged byte is refused
naming the store file."""

from __future__ import annotations

import os
import pickle
import subprocess

import grain
import numpy as np
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree import AudioTree
from audiotree.errors import ColumnStoreError
from audiotree.index import build_index, open_index
from audiotree.index.columns import open_columns, store_folder
from audiotree.sources import Corpus, create_audio_dataset
from audiotree.synth import synthesize

RATE = 8000


def _write(path, seconds, seed, group="speech"):
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, synthesize(group, seconds, RATE, 1, np.random.default_rng(seed)), RATE)
    return str(path)


@pytest.fixture
def corpus(tmp_path):
    """24 files ``f01.wav``..``f24.wav`` and their index."""
    folder = tmp_path / "audio"
    for k in range(1, 25):
        _write(folder / f"f{k:02d}.wav", 0.3 + 0.01 * k, seed=k)
    out = tmp_path / "corpus.parquet"
    build_index(str(folder), out, executor="serial", show_progress=False)
    return folder, out


def _another_job_adds_a_file(folder, out):
    """Another job indexes one more file that sorts first, and builds a dataset over the new index."""
    _write(folder / "a00.wav", 0.5, seed=99)
    build_index(str(folder), out, executor="serial", show_progress=False)
    create_audio_dataset(corpus=Corpus(index=out), duration=0.25, sample_rate=RATE)


def _names(filepaths):
    return [os.path.basename(str(p)) for p in filepaths]


@pytest.mark.slow
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_new_torch_workers_read_the_store_their_dataset_was_planned_on(corpus, context):
    pytest.importorskip("torch")
    import audiotree.torch as att

    folder, out = corpus
    ds = create_audio_dataset(corpus=Corpus(index=out), duration=0.25, sample_rate=RATE, shuffle=False)
    loader = att.create_dataloader(ds, batch_size=6, num_workers=2, persistent_workers=False,
                                   multiprocessing_context=context)
    first = [n for batch in loader for n in _names(batch.filepath)]
    assert first == [f"f{k:02d}.wav" for k in range(1, 25)]
    _another_job_adds_a_file(folder, out)
    second = [n for batch in loader for n in _names(batch.filepath)]  # epoch 2: new workers
    assert second == first


@pytest.mark.slow
def test_a_new_grain_iterator_reads_the_store_its_dataset_was_planned_on(corpus):
    folder, out = corpus
    ds = create_audio_dataset(corpus=Corpus(index=out), duration=0.25, sample_rate=RATE, shuffle=False)
    it = (ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
          .batch(6, batch_fn=AudioTree.batch).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    first = [n for batch in it for n in _names(batch.filepath)]
    assert sorted(first) == [f"f{k:02d}.wav" for k in range(1, 25)]
    _another_job_adds_a_file(folder, out)
    assert [n for batch in it for n in _names(batch.filepath)] == first  # a new iterator: new workers


def test_a_removed_generation_is_refused_not_replaced(corpus):
    folder, out = corpus
    ds = create_audio_dataset(corpus=Corpus(index=out), duration=0.25, sample_rate=RATE, shuffle=False)
    planned = ds[0]
    directory = open_columns(open_index(out)).directory
    _another_job_adds_a_file(folder, out)
    import shutil

    shutil.rmtree(directory)  # (what a later build's clean-up does to old generations)
    clone = pickle.loads(pickle.dumps(ds))
    with pytest.raises(ColumnStoreError, match="the column store this dataset was planned on is gone"):
        clone[0]
    assert _names(planned.filepath) == ["f01.wav"]


def test_old_generations_beyond_the_kept_ones_are_removed(corpus):
    from audiotree.index.columns import KEEP_GENERATIONS

    folder, out = corpus
    for k in range(KEEP_GENERATIONS + 2):
        _write(folder / f"b{k}.wav", 0.5, seed=50 + k)
        build_index(str(folder), out, executor="serial", show_progress=False)
        open_columns(open_index(out))
    generations = [n for n in os.listdir(store_folder(str(out))) if n.startswith("g")]
    assert len(generations) == KEEP_GENERATIONS


def test_an_index_swapped_for_one_of_the_same_size_and_time_gets_its_own_store(tmp_path):
    folder = tmp_path / "audio"
    files = [_write(folder / f"f{k}.wav", 0.4, seed=k) for k in range(4)]
    labels = tmp_path / "labels.csv"
    labels.write_text("path,snr\n" + "".join(f"{f},{k}.5\n" for k, f in enumerate(files)))
    built = tmp_path / "built.parquet"
    build_index(str(folder), built, executor="serial", show_progress=False, labels=str(labels))
    table = pq.read_table(built)
    snr = table.column("snr").to_pylist()
    swapped = table.set_column(table.column_names.index("snr"), "snr",
                               __import__("pyarrow").array([snr[1], snr[0], *snr[2:]], table.column("snr").type))
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    for path, t in ((a, table), (b, swapped)):  # the same layout: only two values change places
        pq.write_table(t, path, compression="none", use_dictionary=False)
    os.utime(b, ns=(os.stat(a).st_atime_ns, os.stat(a).st_mtime_ns))
    assert os.path.getsize(a) == os.path.getsize(b)

    def first_label(index):
        ds = create_audio_dataset(corpus=Corpus(index=index, labels=["snr"]), duration=0.25, sample_rate=RATE,
                                  shuffle=False)
        return _names(ds[0].filepath)[0], float(ds[0].extras["snr"][0])

    assert first_label(a) == ("f0.wav", 0.5)
    subprocess.run(["cp", "-p", str(b), str(a)], check=True)
    assert os.stat(a).st_mtime_ns == os.stat(b).st_mtime_ns and os.path.getsize(a) == os.path.getsize(b)
    assert first_label(a) == ("f0.wav", 1.5)
