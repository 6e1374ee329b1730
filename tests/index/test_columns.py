"""The index's column store: built once, mapped by every process, constant-size in a worker's pickle,
rebuilt when the index changes, refused when damaged; grouping by any label; per-item ``loudest`` plans."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile

from audiotree import AudioTree, ExcerptConfig
from audiotree.excerpts.plan import build_plan
from audiotree.index import build_index, open_index
from audiotree.index.columns import open_columns, store_folder
from audiotree.sources import Corpus, create_audio_dataset, create_balanced_audio_dataset
from audiotree.synth import synthesize

RATE = 16_000


def _write(path, seconds, *, seed, group="speech", scale=1.0):
    data = synthesize(group, seconds, RATE, 1, np.random.default_rng(seed)) * scale
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, data, RATE)
    return str(path)


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    """Six files in two groups, with a category, a text and a numeric label, and loudness profiles."""
    root = tmp_path_factory.mktemp("columns")
    files = [_write(root / g / f"{g}{k}.wav", 1.5 + 0.5 * k, seed=10 * k + j, group=g)
             for j, g in enumerate(("speech", "music")) for k in range(3)]
    labels = root / "labels.csv"
    labels.write_text("path,speaker,text,snr\n" + "".join(
        f"{f},{'ab'[k % 2]},words {k} ünï,{k}.5\n" for k, f in enumerate(files)))
    out = root / "corpus.parquet"
    build_index({"speech": str(root / "speech"), "music": str(root / "music")}, out, executor="serial",
                show_progress=False, labels=str(labels), text_columns=["text"])
    return out, files


def _repeat(index, out, times):
    """``index`` with its rows repeated ``times`` times (same columns and metadata), written with pyarrow."""
    table = pq.read_table(index)
    pq.write_table(pa.concat_tables([table] * times).replace_schema_metadata(table.schema.metadata), out)
    return out


def test_a_workers_pickle_does_not_grow_with_the_rows(small_index, tmp_path):
    index, _ = small_index
    sizes = {}
    for times in (1, 400):
        big = _repeat(index, tmp_path / f"x{times}.parquet", times)
        ds = create_balanced_audio_dataset(corpus=Corpus(index=big, group_by="group", labels=["speaker", "text"]), duration=0.5,
                                           excerpt=ExcerptConfig(allow_text_crops=True), sample_rate=RATE)
        sizes[times] = len(pickle.dumps(ds))
        clone = pickle.loads(pickle.dumps(ds))
        assert AudioTree.batch([clone[i] for i in range(4)]).waveform.shape == (4, 1, RATE // 2)
    # 2,400 rows against 6: a per-row Python object (a path, a group name) would add tens of kilobytes.
    assert sizes[400] - sizes[1] < 2_000, sizes


def test_the_store_is_built_once_and_mapped_after(small_index):
    index, _ = small_index
    store = open_columns(open_index(index))
    assert os.path.dirname(store.directory) == store_folder(str(index)) and os.path.isdir(store.directory)
    stamp = os.stat(os.path.join(store.directory, "manifest.json")).st_mtime_ns
    again = open_columns(open_index(index, columns=()))
    assert os.stat(os.path.join(again.directory, "manifest.json")).st_mtime_ns == stamp
    assert len(again) == 6 and again.string("path", 0).endswith(".wav")
    assert again.value("size", 0) == os.path.getsize(os.path.join(again.root or "", again.string("path", 0)))
    assert again.column("duration").shape == (6,)


def test_a_rebuilt_index_gets_a_new_store(small_index, tmp_path):
    index, _ = small_index
    copy = _repeat(index, tmp_path / "c.parquet", 1)
    assert len(open_columns(open_index(copy))) == 6
    _repeat(index, copy, 3)
    assert len(open_columns(open_index(copy))) == 18


@pytest.mark.parametrize("damage", ["truncate", "manifest", "selection"])
def test_a_damaged_store_is_refused_naming_it(small_index, tmp_path, damage):
    index, _ = small_index
    copy = _repeat(index, tmp_path / "d.parquet", 2)
    rows_ds = create_audio_dataset(corpus=Corpus(index=copy, min_duration=2.0), duration=0.5, sample_rate=RATE)
    folder = open_columns(open_index(copy)).directory
    if damage == "truncate":
        path = os.path.join(folder, "duration.bin")
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 8)
    elif damage == "manifest":
        with open(os.path.join(folder, "manifest.json"), "w") as f:
            f.write("{not json")
    else:
        (sel,) = [n for n in os.listdir(folder) if n.startswith("sel-") and n.endswith(".npy")]
        np.save(os.path.join(folder, sel), np.array([10_000], dtype=np.int64))
    with pytest.raises(ValueError, match=r"d\.parquet\.columns/g\d+-\w+/\S+: the index's column store is damaged"):
        if damage == "selection":
            pickle.loads(pickle.dumps(rows_ds))[0]
        else:
            create_audio_dataset(corpus=Corpus(index=copy), duration=0.5, sample_rate=RATE)


def test_group_by_a_text_or_numeric_label(small_index):
    index, files = small_index
    ds = create_balanced_audio_dataset(corpus=Corpus(index=index, group_by="text", labels=["text"]), duration=0.5,
                                       excerpt=ExcerptConfig(allow_text_crops=True), sample_rate=RATE)
    batch = AudioTree.batch([ds[i] for i in range(24)])
    assert {s for s in batch.source} == {f"words {k} ünï" for k in range(6)}
    assert all(s == t for s, t in zip(batch.source, batch.extras["text"]))
    ds = create_balanced_audio_dataset(corpus=Corpus(index=index, group_by="snr"), duration=0.5, sample_rate=RATE)
    assert {ds[i].source[0] for i in range(24)} == {f"{k}.5" for k in range(6)}


def test_repeated_paths_are_rows_of_their_own(small_index, tmp_path):
    index, _ = small_index
    big = _repeat(index, tmp_path / "r.parquet", 5)
    ds = create_audio_dataset(corpus=Corpus(index=big, labels=["speaker"]), duration=0.5, sample_rate=RATE, shuffle=False)
    first = [ds[i] for i in range(30)]
    assert [str(t.filepath[0]) for t in first[:6]] == [str(t.filepath[0]) for t in first[6:12]]


def test_loudest_per_item_plans_equal_the_whole_index_plan(small_index):
    from audiotree.sources.indexed import LoudestSpec, rows_from_index

    index, _ = small_index
    spec = LoudestSpec(ExcerptConfig(strategy="loudest", lufs_cutoff=-35.0), 1.0)
    rows = rows_from_index(index, loudest=spec)
    ix = open_index(index, columns="all")
    whole = build_plan([ix.profile(r) for r in rows.rows()], duration=1.0, cutoff=-35.0, keep_profiles=True)
    for i in range(len(rows)):
        mine, theirs = rows.loudest_row(i), whole.row(i)
        assert mine.best == theirs.best and mine.first.tolist() == theirs.first.tolist()
        rng_a, rng_b = np.random.default_rng(i), np.random.default_rng(i)
        (block, (lufs, windows)), (their_block, (their_lufs, their_windows)) = mine.pick(rng_a), theirs.pick(rng_b)
        assert block == their_block and lufs == pytest.approx(their_lufs, abs=1e-5)
        np.testing.assert_allclose(windows, their_windows, atol=1e-5)
        assert mine.best_lufs == pytest.approx(theirs.best_lufs, abs=1e-9)


@pytest.mark.parametrize("cutoff", [-95.0, -60.0, -40.0, -25.0, -10.0])
@pytest.mark.parametrize("seconds", [0.2, 0.35, 3.0, 7.0])
def test_the_pruned_per_item_plan_equals_gating_every_window(cutoff, seconds):
    from audiotree.excerpts.plan import ProfileRowPlan

    rng = np.random.default_rng(int(seconds * 10) + int(-cutoff))
    # Speech-like bursts, digital silence, room tone and a loud passage: every bound case occurs.
    profile = (10 ** rng.uniform(-9, -1, 900)).astype(np.float32)
    profile[100:200] = 0
    profile[300:420] = 1e-8
    profile[600:700] *= 50
    for p in (profile, profile[:3], np.zeros(50, np.float32), np.full(40, 1e-8, np.float32)):
        mine = ProfileRowPlan(p, duration=seconds, cutoff=cutoff, keep_profiles=True)
        theirs = build_plan([p], duration=seconds, cutoff=cutoff, keep_profiles=True).row(0)
        assert mine.first.tolist() == theirs.first.tolist() and mine.count.tolist() == theirs.count.tolist()
        assert mine.best == theirs.best and mine.qualifies == theirs.qualifies
        assert mine.best_lufs == pytest.approx(theirs.best_lufs, abs=1e-9) or mine.best_lufs == theirs.best_lufs
        if mine.qualifies:
            for seed in range(5):
                a, b = mine.pick(np.random.default_rng(seed)), theirs.pick(np.random.default_rng(seed))
                assert a[0] == b[0] and a[1][0] == pytest.approx(b[1][0], abs=1e-5)


def test_skip_silent_flags_are_computed_once_and_kept(small_index, tmp_path):
    index, files = small_index
    root = os.path.dirname(files[0])
    quiet = _write(tmp_path / "quiet" / "q.wav", 2.0, seed=99, scale=1e-5)
    out = tmp_path / "q.parquet"
    build_index({"speech": os.path.dirname(root), "quiet": os.path.dirname(quiet)}, out, executor="serial",
                show_progress=False)
    excerpt = ExcerptConfig(strategy="loudest", lufs_cutoff=-40.0, skip_silent=True)
    ds = create_audio_dataset(corpus=Corpus(index=out), duration=1.0, sample_rate=RATE, excerpt=excerpt)
    assert len(open_index(out)) == 7 and len(ds) == 6
    assert all("quiet" not in str(ds[i].filepath[0]) for i in range(9))
    folder = open_columns(open_index(out)).directory
    kept = [n for n in os.listdir(folder) if n.startswith("qualifying-") and n.endswith(".npy")]
    assert len(kept) == 1
    flags = np.load(os.path.join(folder, kept[0]))
    assert flags.tolist().count(False) == 1


def test_the_manifest_records_the_index_it_came_from(small_index):
    index, _ = small_index
    with open(os.path.join(open_columns(open_index(index)).directory, "manifest.json")) as f:
        manifest = json.load(f)
    assert manifest["index"]["size"] == os.path.getsize(index) and manifest["rows"] == 6
    assert set(manifest["labels"]) == {"speaker", "text", "snr"}


def test_a_store_closes_the_files_it_opened(small_index, tmp_path):
    index, _ = small_index
    copy = _repeat(index, tmp_path / "f.parquet", 2)
    rows = create_audio_dataset(corpus=Corpus(index=copy, min_duration=2.0), duration=0.5, sample_rate=RATE)
    store = open_columns(open_index(copy))
    name = store.save_selection(np.array([1, 3], dtype=np.int64))
    assert store.selection_row(name, 1) == 3 and store.string("path", 0) and store.value("size", 2) > 0
    fds = [fd for handle in store._files.values() for fd in handle[0].descriptors]
    assert len(fds) >= 4
    store.close()
    assert store._files == {} and store.value("size", 2) > 0  # reads open the files again
    store.close()
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)
    assert len(rows) > 0


def test_a_file_shorter_than_the_excerpt_takes_its_lufs_from_the_profile(tmp_path):
    from audiotree.dsp.loudness import integrated_loudness
    from audiotree.excerpts.plan import ProfileRowPlan

    short = _write(tmp_path / "s" / "short.wav", 1.3, seed=7, group="music")
    out = tmp_path / "short.parquet"
    build_index(os.path.dirname(short), out, executor="serial", show_progress=False)
    ds = create_audio_dataset(corpus=Corpus(index=out), duration=3.0, sample_rate=RATE, excerpt=ExcerptConfig(strategy="loudest"))
    item = ds[0]
    profile = open_index(out, columns="all").profile(0)
    reading = ProfileRowPlan(profile, duration=3.0, cutoff=-70.0, keep_profiles=True).whole()
    # The profile's reading, not a meter pass; and the meter agrees with it (BS.1770 drops the same partial block).
    assert float(item.lufs[0]) == reading[0]
    np.testing.assert_allclose(item.lufs_windows[0, :reading[1].size], reading[1], atol=1e-6)
    data, _ = soundfile.read(short, dtype="float32")
    assert abs(integrated_loudness(data[None], RATE) - reading[0]) < 0.01
    assert item.waveform.shape == (1, 1, 3 * RATE)
