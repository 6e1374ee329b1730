"""Corpora in the shapes they ship in: webdataset tar shards and Parquet with embedded audio, read in place.

The same encoded files as a folder, as tar shards and as Parquet rows
(``container_factories.make_corpus``) must give the same items, item for item.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import grain
import numpy as np
import pytest
import soundfile

from audiotree import ExcerptConfig
from audiotree.errors import AudioReadError
from audiotree.index import build_index, open_index
from audiotree.io import AudioFile
from audiotree.io.members import parse
from audiotree.sources import (
    Corpus,
    Order,
    WindowConfig,
    create_audio_dataset,
    create_balanced_audio_dataset,
    create_windowed_audio_dataset,
    find_audio_files,
)
from audiotree.discovery.containers import expand_braces
from container_factories import RATE, make_corpus

SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
HF_FIXTURE = Path(__file__).resolve().parent.parent / "data" / "hf_parquet" / "train-00000-of-00001.parquet"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return make_corpus(tmp_path_factory.mktemp("containers"), files=8, per_shard=2)


def _shapes(corpus) -> dict:
    return {
        "folder": str(corpus["unpacked"]),
        "shards": str(corpus["shards"] / f"train-{{000000..{corpus['num_shards'] - 1:06d}}}.tar"),
        "parquet": str(corpus["parquet"] / "train-*.parquet"),
        "parquet_hf": str(corpus["parquet_hf"] / "train-*.parquet"),
    }


def _waves(ds, n=None) -> list:
    n = len(ds) if n is None else n
    return [np.asarray(ds[i].waveform) for i in range(n)]


def _same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.shape == y.shape and np.array_equal(x, y), f"item {i} differs"
        assert np.abs(x).max() > 0  # real audio, not zeros


# ------------------------------------------------------------------ URLs and discovery


def test_fsspec_tar_url_reads_the_member(corpus):
    shard = corpus["shards"] / "train-000001.tar"
    url = f"tar://utt0003.flac::{shard}"
    reference, rate = soundfile.read(corpus["unpacked"] / "utt0003.flac", dtype="float32", always_2d=True)
    with AudioFile(url) as f:
        assert (f.info.frames, f.info.sample_rate, f.info.format) == (len(reference), rate, "FLAC")
        np.testing.assert_array_equal(f.read(1000, 3000), reference[1000:4000])
    ds = create_audio_dataset(filepaths=[url], sample_rate=RATE, duration=None, shuffle=False)
    np.testing.assert_array_equal(np.asarray(ds[0].waveform)[0, 0], reference[:, 0])
    with pytest.raises(AudioReadError, match="no member 'nope.flac'"):
        AudioFile(f"tar://nope.flac::{shard}")


def test_brace_patterns_expand_like_webdataset():
    assert expand_braces("s3://b/train-{000000..000002}.tar") == [
        "s3://b/train-000000.tar", "s3://b/train-000001.tar", "s3://b/train-000002.tar"]
    assert expand_braces("x-{8..10}-{a,b}") == ["x-8-a", "x-8-b", "x-9-a", "x-9-b", "x-10-a", "x-10-b"]
    assert expand_braces("plain{}.tar") == ["plain{}.tar"]


def test_discovery_lists_members_in_shard_order_and_skips_other_members(corpus):
    found = find_audio_files(_shapes(corpus)["shards"])
    refs = [parse(p) for p in found]
    assert [r.name for r in refs] == [f"{k}.flac" for k in corpus["keys"]]
    assert [Path(r.container).name for r in refs] == [f"train-{i // 2:06d}.tar" for i in range(8)]
    assert all(r.offset > 0 and r.size == len(corpus["data"][r.name[:-5]]) for r in refs)
    with pytest.raises(FileNotFoundError):
        find_audio_files(str(corpus["shards"] / "train-{000000..000009}.tar"))


# ------------------------------------------------------------------ equality with the unpacked folder


@pytest.mark.parametrize("shape", ["shards", "parquet", "parquet_hf"])
def test_random_excerpts_equal_the_unpacked_folder(corpus, shape):
    shapes = _shapes(corpus)
    build = dict(sample_rate=RATE, duration=0.5, num_epochs=2, shuffle_seed=3)
    _same(_waves(create_audio_dataset(sources=shapes[shape], **build)),
          _waves(create_audio_dataset(sources=shapes["folder"], **build)))


@pytest.mark.parametrize("shape", ["shards", "parquet", "parquet_hf"])
def test_whole_utterances_equal_the_unpacked_folder(corpus, shape):
    shapes = _shapes(corpus)
    build = dict(sample_rate=RATE, duration=None, shuffle=False)
    _same(_waves(create_audio_dataset(sources=shapes[shape], **build)),
          _waves(create_audio_dataset(sources=shapes["folder"], **build)))


def test_loudest_with_an_index_equals_the_unpacked_folder(corpus, tmp_path):
    waves = {}
    for shape, source in _shapes(corpus).items():
        out = tmp_path / f"{shape}.parquet"
        build_index(source, out, executor="serial", show_progress=False)
        ds = create_audio_dataset(corpus=Corpus(index=out), sample_rate=RATE, duration=0.25,
                                  excerpt=ExcerptConfig(strategy="loudest"), num_epochs=1, shuffle_seed=1)
        waves[shape] = _waves(ds)
    _same(waves["shards"], waves["folder"])
    _same(waves["parquet"], waves["folder"])
    _same(waves["parquet_hf"], waves["folder"])


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["shards", "parquet"])
def test_two_workers_equal_the_unpacked_folder_in_process(corpus, shape):
    shapes = _shapes(corpus)
    build = dict(sample_rate=RATE, duration=0.5, num_epochs=None, shuffle_seed=5)
    reference = list(itertools.islice(iter(create_audio_dataset(sources=shapes["folder"], **build)
                                           .to_iter_dataset(SYNC)), 20))
    it = iter(create_audio_dataset(sources=shapes[shape], **build).to_iter_dataset(SYNC)
              .mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    try:
        items = [next(it) for _ in range(20)]
    finally:
        it.close()
    _same([np.asarray(x.waveform) for x in items], [np.asarray(x.waveform) for x in reference])


def test_exact_resume_in_the_middle_of_a_shard(corpus):
    ds = create_audio_dataset(sources=_shapes(corpus)["shards"], sample_rate=RATE, duration=0.3, num_epochs=None,
                              shuffle=False)
    reference = [np.asarray(x.waveform) for x in itertools.islice(iter(ds.to_iter_dataset(SYNC)), 9)]
    it = iter(ds.to_iter_dataset(SYNC))
    head = [np.asarray(next(it).waveform) for _ in range(3)]  # stops after the first member of shard 1
    state = it.get_state()
    resumed = iter(ds.to_iter_dataset(SYNC))
    resumed.set_state(state)
    tail = [np.asarray(next(resumed).waveform) for _ in range(6)]
    _same(head + tail, reference)


def test_windowed_and_balanced_builders_take_shards_and_parquet(corpus):
    shapes = _shapes(corpus)
    win = {s: create_windowed_audio_dataset(sources=shapes[s], window=WindowConfig(duration=0.4), sample_rate=RATE, shuffle_seed=2)
           for s in ("folder", "shards", "parquet")}
    _same(_waves(win["shards"]), _waves(win["folder"]))
    _same(_waves(win["parquet"]), _waves(win["folder"]))
    mix = create_balanced_audio_dataset(sources={"a": shapes["shards"], "b": shapes["parquet"]}, sample_rate=RATE,
                                        duration=0.3)
    items = [mix[i] for i in range(6)]
    assert {x.source[0] for x in items} == {"a", "b"}
    assert all(x.filepath[0].startswith(("tar://", "parquet://")) for x in items)


# ------------------------------------------------------------------ labels


def test_sidecars_become_label_columns_and_other_members_are_counted(corpus, tmp_path):
    out = tmp_path / "ix.parquet"
    report = build_index(_shapes(corpus)["shards"], out, executor="serial", show_progress=False, loudness=False)
    assert report.rows == 8 and report.skipped_members == {".jpg": 8}
    ix = open_index(out, columns="all")
    assert ix.meta["labels"]["speaker"]["kind"] == "category"
    assert ix.meta["labels"]["n"]["kind"] == "numeric"
    assert ix.table.column("n").to_pylist() == list(range(8))
    assert ix.table.column("txt").to_pylist() == [f"words of {k}" for k in corpus["keys"]]
    ds = create_audio_dataset(corpus=Corpus(index=out, labels=["speaker", "n"]), sample_rate=RATE, duration=0.2, shuffle=False)
    vocab = ix.vocabulary("speaker")
    for i in (0, 4, 7):
        assert vocab[int(ds[i].extras["speaker"][0])] == corpus["labels"][corpus["keys"][i]]["speaker"]
        assert int(ds[i].extras["n"][0]) == i


def test_index_cli_over_a_brace_pattern(corpus, tmp_path):
    from click.testing import CliRunner

    from audiotree.cli import cli

    out = tmp_path / "cli.parquet"
    result = CliRunner().invoke(cli, ["index", _shapes(corpus)["shards"], "--out", str(out), "--executor", "serial",
                                      "--no-progress", "--no-loudness"])
    assert result.exit_code == 0, result.output
    assert "8 rows" in result.output and "skipped 8 .jpg member(s)" in result.output
    assert [parse(p).name for p in open_index(out).paths()] == [f"{k}.flac" for k in corpus["keys"]]


# ------------------------------------------------------------------ Parquet written by Hugging Face datasets


def test_hf_written_parquet_rows_are_items_and_columns_labels(tmp_path):
    ds = create_audio_dataset(sources=str(HF_FIXTURE), sample_rate=8000, duration=None, shuffle=False,
                              corpus=Corpus(on_read_error="skip"))
    assert len(ds) == 4
    waves = [ds[i] for i in range(4)]
    assert [w.waveform.shape[-1] for w in waves[:3]] == [4800, 3200, 4000]
    assert waves[3] is None  # the fixture's fourth cell is not audio
    t = np.arange(4800) / 8000
    np.testing.assert_allclose(np.asarray(waves[0].waveform)[0, 0], 0.3 * np.sin(2 * np.pi * 440 * t), atol=1e-4)
    out = tmp_path / "hf.parquet"
    report = build_index(str(HF_FIXTURE), out, executor="serial", show_progress=False)
    assert (report.rows, report.unreadable) == (4, 1)
    ix = open_index(out, columns="all")
    assert ix.table.column("speaker").to_pylist() == ["spk1", "spk2", "spk1", "spk3"]
    assert ix.table.column("score").to_pylist() == [1.5, 2.0, 0.5, 0.0]
    assert ix.table.column("text").to_pylist()[0] == "a tone at four forty"
    error = ix.table.column("error").to_pylist()[3]
    assert "row=3" in error and HF_FIXTURE.name in error
    indexed = create_audio_dataset(corpus=Corpus(index=out, labels=["speaker"]), sample_rate=8000, duration=0.2, shuffle=False)
    assert len(indexed) == 3


def test_hf_parquet_bad_cell_raises_naming_file_and_row():
    ds = create_audio_dataset(sources=str(HF_FIXTURE), sample_rate=8000, duration=None, shuffle=False)
    with pytest.raises(AudioReadError, match=r"row_group=0&row=3::.*train-00000-of-00001\.parquet"):
        ds[3]
    with pytest.warns(UserWarning, match="row=3"):
        assert create_audio_dataset(sources=str(HF_FIXTURE), sample_rate=8000, duration=None, shuffle=False,
                                    corpus=Corpus(on_read_error="warn"))[3] is None


def test_parquet_audio_column_option_and_missing_column(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = HF_FIXTURE.read_bytes()
    table = pq.read_table(HF_FIXTURE)
    plain = pa.table({"wav": table.column("audio").combine_chunks().field("bytes"), "text": table.column("text")})
    pq.write_table(plain.slice(0, 3), tmp_path / "plain.parquet")
    ds = create_audio_dataset(sources=str(tmp_path / "plain.parquet"), corpus=Corpus(audio_column="wav"), sample_rate=8000,
                              duration=None, shuffle=False)
    assert [ds[i].waveform.shape[-1] for i in range(3)] == [4800, 3200, 4000]
    with pytest.raises(AudioReadError, match="no audio column 'sound'"):
        create_audio_dataset(sources=str(tmp_path / "plain.parquet"), corpus=Corpus(audio_column="sound"), sample_rate=8000)
    assert raw  # the fixture itself is untouched


# ------------------------------------------------------------------ per-host splits


@pytest.mark.parametrize("shape", ["shards", "parquet"])
def test_shard_options_give_each_host_whole_containers(corpus, tmp_path, shape):
    source = _shapes(corpus)[shape]
    everything = set(find_audio_files(source))
    out = tmp_path / "ix.parquet"
    build_index(source, out, executor="serial", show_progress=False, loudness=False)
    for build in (dict(sources=source), dict(corpus=Corpus(index=out))):
        seen, units = [], []
        for host in range(2):
            ds = create_audio_dataset(**build, sample_rate=RATE, duration=0.2, shuffle_seed=1,
                                      order=Order(shard_options=grain.sharding.ShardOptions(host, 2)))
            paths = [ds[i].filepath[0] for i in range(len(ds))]
            seen += paths
            units.append({(parse(p).container, parse(p).offset if shape == "parquet" else 0) for p in paths})
        assert sorted(seen) == sorted(everything)  # disjoint and complete
        assert not units[0] & units[1] and len(units[0]) == len(units[1]) == 2  # whole shards / row groups
    with pytest.raises(ValueError, match="gets no items"):
        create_audio_dataset(sources=source, sample_rate=RATE, order=Order(shard_options=grain.sharding.ShardOptions(5, 6)))
