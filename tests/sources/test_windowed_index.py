"""Windowed sampling over a corpus index holds arrays, not per-file Python objects: durations, loudness cells and
slots come from (and live in) the index's column store, a worker's pickle does not grow with the rows, and every
item is the one the path-keyed planner gives."""

from __future__ import annotations

import math
import os
import pickle

import grain
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree import AudioTree
from audiotree.index import build_index
from audiotree.index import open_index
from audiotree.index.columns import open_columns
from audiotree.sources import (
    Corpus,
    WindowConfig,
    create_balanced_audio_dataset,
    create_windowed_audio_dataset,
    load_window_lufs,
)
from audiotree.sources.slots import build_slot_index, plan_slots
from audiotree.synth import synthesize

RATE = 16_000
SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """Six files in two groups, 1.3 to 4.7 s long, one of them near silent, with loudness profiles."""
    root = tmp_path_factory.mktemp("windowed_index")
    for j, group in enumerate(("speech", "music")):
        for k in range(3):
            data = synthesize(group, 1.3 + 1.7 * k, RATE, 1, np.random.default_rng(10 * k + j))
            path = root / group / f"{group}{k}.wav"
            path.parent.mkdir(exist_ok=True)
            soundfile.write(path, data * (1e-4 if k == 1 else 1.0), RATE)
    out = root / "corpus.parquet"
    build_index({"speech": str(root / "speech"), "music": str(root / "music")}, out, executor="serial",
                show_progress=False)
    return out


def _repeat(index, out, times):
    """``index`` with its rows repeated ``times`` times (same columns and metadata), written with pyarrow."""
    table = pq.read_table(index)
    pq.write_table(pa.concat_tables([table] * times).replace_schema_metadata(table.schema.metadata), out)
    return out


def _key(item):
    return item.filepath[0], float(item.offset[0]), np.asarray(item.waveform).tobytes()


WINDOWED = {
    "plain": dict(window=WindowConfig(duration=0.5)),
    "loudness": dict(window=WindowConfig(duration=0.5, hop=0.3, alpha=0.5, lufs_window_sec=0.5, lufs_cutoff=-50.0)),
}


@pytest.mark.parametrize("kind", ["plain", "loudness", "balanced"])
def test_a_workers_pickle_does_not_grow_with_the_rows(index, tmp_path, kind):
    sizes = {}
    for times in (1, 400):
        big = _repeat(index, tmp_path / f"x{times}.parquet", times)
        if kind == "balanced":
            ds = create_balanced_audio_dataset(corpus=Corpus(index=big, group_by="group"), sample_rate=RATE,
                                               window=WindowConfig(duration=0.5, lufs_window_sec=0.5))
        else:
            ds = create_windowed_audio_dataset(corpus=Corpus(index=big), sample_rate=RATE, **WINDOWED[kind])
        blob = pickle.dumps(ds)
        sizes[times] = len(blob)
        assert b"speech0.wav" not in blob  # no path string travels with the dataset
        clone = pickle.loads(blob)
        assert AudioTree.batch([clone[i] for i in range(4)]).waveform.shape == (4, 1, RATE // 2)
    # 2,400 files and some 10,000 windows against 6 and 25: a path per file, or a slot array in the pickle, would
    # add tens of kilobytes.
    assert sizes[400] - sizes[1] < 2_000, sizes


@pytest.mark.parametrize("kind", sorted(WINDOWED))
def test_items_match_the_path_keyed_planner(index, kind):
    """The index's arrays give the very items a file list with the same durations and loudness gives."""
    options = WINDOWED[kind]
    ds = create_windowed_audio_dataset(corpus=Corpus(index=index), sample_rate=RATE, shuffle_seed=4, num_epochs=2, **options)
    view = load_window_lufs(index, lufs_window_sec=0.5)
    files = list(view.durations)  # in the index's row order
    extra = {"lufs_per_file": view.lufs} if options["window"].lufs_window_sec else {}
    reference = create_windowed_audio_dataset(filepaths=files, durations=view.durations, sample_rate=RATE,
                                              shuffle_seed=4, num_epochs=2, **options, **extra)
    assert len(ds) == len(reference)
    assert [_key(ds[i]) for i in range(len(ds))] == [_key(reference[i]) for i in range(len(reference))]
    if kind == "loudness":  # the quiet files lost their slots
        assert len(ds) < len(create_windowed_audio_dataset(corpus=Corpus(index=index), sample_rate=RATE, window=WindowConfig(duration=0.5, hop=0.3, alpha=0.5), num_epochs=2))


def test_loudness_cells_are_computed_once_and_kept_in_the_store(index):
    create_windowed_audio_dataset(corpus=Corpus(index=index), window=WindowConfig(duration=0.5, lufs_window_sec=0.4), sample_rate=RATE)
    folder = open_columns(open_index(index)).directory
    kept = sorted(n for n in os.listdir(folder) if n.startswith("window-lufs-4b.") and n.endswith(".npy"))
    assert kept == ["window-lufs-4b.offsets.npy", "window-lufs-4b.values.npy"]
    stamp = os.stat(os.path.join(folder, kept[1])).st_mtime_ns
    again = create_windowed_audio_dataset(corpus=Corpus(index=index), window=WindowConfig(duration=0.5, lufs_window_sec=0.4), sample_rate=RATE)
    assert os.stat(os.path.join(folder, kept[1])).st_mtime_ns == stamp and len(again) > 0
    offsets = np.load(os.path.join(folder, kept[0]))
    view = load_window_lufs(index, lufs_window_sec=0.4)
    assert offsets.shape == (7,) and int(offsets[-1]) == sum(v.size for v in view.lufs.values())


def test_a_damaged_slot_plan_is_refused_naming_the_store(index, tmp_path):
    copy = _repeat(index, tmp_path / "d.parquet", 2)
    ds = create_windowed_audio_dataset(corpus=Corpus(index=copy), window=WindowConfig(duration=0.5), sample_rate=RATE, shuffle=False)
    folder = open_columns(open_index(copy)).directory
    (plan,) = [n for n in os.listdir(folder) if n.startswith("slots-") and n.endswith(".file.npy")]
    np.save(os.path.join(folder, plan), np.full(len(ds), 10_000, dtype=np.int32))
    with pytest.raises(ValueError, match=r"d\.parquet\.columns/g\d+-\w+/slots-\w+\.file\.npy: the index's column store "
                                         r"is damaged"):
        pickle.loads(pickle.dumps(ds))[0]


def _reference_slots(durations, cells, *, duration, hop, alpha, lufs_window_sec, lufs_cutoff):
    """The per-file loop the vectorised planner replaces: (file, offset, stride, max_offset) per kept slot."""
    out = []
    for i, dur in enumerate(durations):
        usable = max(0.0, float(dur) - duration)
        natural = max(1, math.floor(usable / hop + 1e-9) + 1)
        m = max(1, int(round(natural ** alpha)))
        stride = usable / m
        nominal = np.arange(m, dtype=np.float64) * stride
        if cells is not None and cells[i].size:
            centre = np.clip(((nominal + duration / 2) / lufs_window_sec).astype(np.int64), 0, cells[i].size - 1)
            nominal = nominal[cells[i][centre] >= lufs_cutoff]
        out += [(i, float(o), stride, usable) for o in nominal]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_vectorised_planner_is_the_per_file_loop_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    n = 60
    durations = np.where(rng.random(n) < 0.1, rng.random(n) * 0.5, rng.random(n) * 30.0)
    duration, hop = float(rng.choice([0.25, 0.5, 1.0, 1.3])), float(rng.choice([0.1, 0.3, 0.5, 1.0]))
    alpha, window, cutoff = float(rng.choice([0.0, 0.37, 0.5, 1.0])), 0.4, -30.0
    cells = [(rng.random(int(d // window)) * 60 - 60).astype(np.float32) for d in durations]
    ends = np.cumsum([c.size for c in cells])
    for with_cells in (False, True):
        plan = plan_slots(durations, duration=duration, hop=hop, alpha=alpha, lufs_window_sec=window,
                          lufs_cutoff=cutoff, cells=(ends - [c.size for c in cells], ends, np.concatenate(cells))
                          if with_cells else None)
        slots = plan.to_index()
        got = [slots.at(k) for k in range(len(slots))]
        assert got == _reference_slots(durations, cells if with_cells else None, duration=duration, hop=hop,
                                       alpha=alpha, lufs_window_sec=window, lufs_cutoff=cutoff)
        files = [f"f{i}" for i in range(n)]
        by_path = build_slot_index(files, dict(zip(files, durations.tolist())), duration=duration, hop=hop,
                                   alpha=alpha, lufs_per_file=dict(zip(files, cells)) if with_cells else None,
                                   lufs_window_sec=window, lufs_cutoff=cutoff)
        assert [by_path.at(k) for k in range(len(by_path))] == got


@pytest.mark.slow
def test_a_windowed_index_dataset_through_two_grain_workers(index):
    ds = create_balanced_audio_dataset(corpus=Corpus(index=index, group_by="group"), sample_rate=RATE, shuffle_seed=2,
                                       window=WindowConfig(duration=0.5, lufs_window_sec=0.5, lufs_cutoff=-50.0))
    it = iter(ds.to_iter_dataset(SYNC))
    single = [_key(next(it)) for _ in range(40)]
    workers = iter(ds.to_iter_dataset(SYNC).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    try:
        multi = [_key(next(workers)) for _ in range(40)]
    finally:
        workers.close()
    assert multi == single
