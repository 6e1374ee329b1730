"""Segment indexes: rows that are [start, end) windows of long recordings, read exactly, with their own labels."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import soundfile
from click.testing import CliRunner

from audiotree import ExcerptConfig
from audiotree.index import build_index, open_index
from audiotree.io.segment import open_audio
from audiotree.sources import Corpus, Output, create_audio_dataset, create_balanced_audio_dataset

RATE = 16_000


def _recording(path, seconds, *, seed=0, rate=RATE, subtype="PCM_16", channels=1):
    rng = np.random.default_rng(seed)
    data = (rng.uniform(-0.5, 0.5, (int(seconds * rate), channels))).astype(np.float32)
    soundfile.write(str(path), data, rate, subtype=subtype)
    return str(path)


def _csv(path, rows, header="path,start,end,id,text,speaker"):
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return str(path)


@pytest.fixture()
def corpus(tmp_path):
    audio = tmp_path / "audio"
    audio.mkdir()
    _recording(audio / "long1.flac", 12.0, seed=1)
    _recording(audio / "long2.wav", 7.0, seed=2)
    _recording(audio / "unused.wav", 1.0, seed=3)
    segments = _csv(tmp_path / "segments.csv", [
        "audio/long1.flac,0.5,2.25,u1,hello world,spk1",
        "audio/long1.flac,2.0,6.125,u2,overlapping is fine,spk2",
        "audio/long1.flac,10.0,12.0,u3,to the end,spk1",
        "audio/long2.wav,1.0,1.5,u4,short,spk2",
        "audio/long2.wav,3.3,6.9,u5,last one,spk1",
    ])
    return tmp_path, str(audio), segments


def _build(corpus, **kwargs):
    root, audio, segments = corpus
    out = str(root / "ix.parquet")
    with pytest.warns(UserWarning, match="no segment"):
        build_index([audio], out, segments=segments, executor="serial", show_progress=False, **kwargs)
    return out


def test_segment_rows_and_columns(corpus):
    out = _build(corpus)
    ix = open_index(out, columns="all")
    assert ix.has_segments and len(ix) == 5
    rows = ix.table.select(["id", "recording", "start", "end", "frames", "duration"]).to_pylist()
    assert [r["id"] for r in rows] == ["u1", "u2", "u3", "u4", "u5"]
    assert rows[1]["frames"] == round(6.125 * RATE) - round(2.0 * RATE)
    assert rows[0]["duration"] == pytest.approx(1.75)
    # The segment's own profile: 100 ms blocks from its first frame.
    assert ix.profile(0).shape == (17,)
    assert ix.vocabulary("speaker") == ["spk1", "spk2"]
    # Default columns still carry the window.
    small = open_index(out)
    assert {"start", "end", "id"} <= set(small.table.column_names)


def test_whole_segments_are_sample_exact_against_soundfile(corpus):
    out = _build(corpus)
    ix = open_index(out)
    ds = create_audio_dataset(corpus=Corpus(index=out, labels=["speaker"]), duration=None, shuffle=False, sample_rate=RATE)
    assert len(ds) == 5
    for i, (path, start, end) in enumerate(zip(ix.paths(), ix.column("start"), ix.column("end"))):
        ref, _ = soundfile.read(path, start=round(start * RATE), stop=round(end * RATE), dtype="float32")
        item = ds[i]
        np.testing.assert_array_equal(item.waveform[0, 0], ref)
        assert item.lengths.tolist() == [ref.shape[0]]
        assert item.offset.tolist() == [pytest.approx(start)]
        assert item.filepath == [path]
    assert ds[0].extras["speaker"].tolist() == [0]


def test_excerpts_and_loudest_stay_inside_the_segment(corpus):
    out = _build(corpus)
    ix = open_index(out)
    starts, ends = ix.column("start"), ix.column("end")
    for excerpt in (ExcerptConfig(), ExcerptConfig(strategy="loudest", lufs_cutoff=-60)):
        ds = create_audio_dataset(corpus=Corpus(index=out), duration=1.0, shuffle=True, num_epochs=4, sample_rate=RATE,
                                  excerpt=excerpt)
        for k in range(len(ds)):
            item = ds[k]
            path = item.filepath[0]
            row = [i for i, p in enumerate(ix.paths()) if p == path and starts[i] <= item.offset[0] + 1e-9
                   and item.offset[0] < ends[i]]
            assert row, (excerpt.strategy, item.offset)
            i = row[-1] if excerpt.strategy == "random" else row[0]
            begin = round(item.offset[0] * RATE)
            stop = min(begin + RATE, round(ends[i] * RATE))
            ref, _ = soundfile.read(path, start=begin, stop=stop, dtype="float32")
            np.testing.assert_array_equal(item.waveform[0, 0, : ref.shape[0]], ref)


def test_padding_never_takes_audio_from_outside(corpus):
    out = _build(corpus)
    # u4 is 0.5 s: a 2 s excerpt is the segment then zeros (the file goes on after it).
    ds = create_audio_dataset(corpus=Corpus(index=out), duration=2.0, shuffle=False, sample_rate=RATE, excerpt=ExcerptConfig(
        strategy="start"))
    ix = open_index(out)
    i = list(ix.column("id")).index("u4")
    item = ds[i]
    assert np.count_nonzero(item.waveform[0, 0, 8000:]) == 0
    assert np.count_nonzero(item.waveform[0, 0, :8000]) > 7000
    reflect = create_audio_dataset(corpus=Corpus(index=out), output=Output(pad_mode="reflect"), duration=2.0, shuffle=False, sample_rate=RATE,
                                   excerpt=ExcerptConfig(strategy="start"))[i]
    ref, _ = soundfile.read(ix.paths()[i], start=16000, stop=24000, dtype="float32")
    assert set(np.round(reflect.waveform[0, 0], 6)) <= set(np.round(ref, 6))  # reflected from the segment only
    loud = create_audio_dataset(corpus=Corpus(index=out), duration=2.0, shuffle=False, sample_rate=RATE,
                                excerpt=ExcerptConfig(strategy="loudest", lufs_cutoff=-60))[i]
    assert np.count_nonzero(loud.waveform[0, 0, 8000:]) == 0


def test_lossy_segment_bounds_within_tolerance(tmp_path):
    path = _recording(tmp_path / "long.ogg", 4.0, seed=4, subtype="VORBIS")
    with open_audio(path) as f:
        whole = f.read(0, None)
    with open_audio(path, (1.25, 2.5)) as f:
        assert f.info.frames == 20000
        part = f.read(0, None)
    # Vorbis seeks are sample-exact in timing; samples match a sequential decode closely.
    assert part.shape == (20000, 1)
    np.testing.assert_allclose(part, whole[20000:40000], atol=1e-4)


def test_durations_filters_and_group_by_work_on_segments(corpus):
    out = _build(corpus)
    ds = create_audio_dataset(corpus=Corpus(index=out, min_duration=2.0), duration=None, shuffle=False, sample_rate=RATE)
    assert len(ds) == 3  # u2 (4.125 s), u3 (2 s), u5 (3.6 s)
    mix = create_balanced_audio_dataset(corpus=Corpus(index=out, group_by="speaker", labels=["speaker"]), duration=0.5, sample_rate=RATE, weights={"spk1": 1, "spk2": 1})
    seen = {int(mix[k].extras["speaker"][0]) for k in range(8)}
    assert seen == {0, 1}


def test_cli_segments_matches_python(corpus, tmp_path):
    from audiotree.cli import cli

    root, audio, segments = corpus
    py = _build(corpus)
    cli_out = str(tmp_path / "cli.parquet")
    result = CliRunner().invoke(cli, ["index", audio, "--out", cli_out, "--segments", segments, "--executor",
                                       "serial", "--no-progress"])
    assert result.exit_code == 0, result.output
    a, b = pq.read_table(py), pq.read_table(cli_out)
    assert a.drop_columns(["mtime_ns"]).equals(b.drop_columns(["mtime_ns"]))
    assert "--segments" in open_index(cli_out).refresh_command()


def test_segments_from_jsonl_parquet_and_python(corpus, tmp_path):
    root, audio, _ = corpus
    path = os.path.join(audio, "long2.wav")
    rows = [{"path": path, "start": 0.0, "end": 1.0, "gender": "f"}, {"path": path, "start": 2.0, "end": 2.5,
                                                                         "gender": "m"}]
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "s.parquet")
    outs = []
    for k, spec in enumerate([str(tmp_path / "s.jsonl"), str(tmp_path / "s.parquet"), rows]):
        out = str(tmp_path / f"o{k}.parquet")
        build_index([path], out, segments=spec, executor="serial", show_progress=False, loudness=False)
        outs.append(pq.read_table(out).select(["path", "start", "end", "frames", "gender"]).to_pylist())
    assert outs[0] == outs[1] == outs[2]
    assert [r["frames"] for r in outs[0]] == [16000, 8000]


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("line, message", [
    ("audio/long2.wav,2.0,2.0,x1,a,b", r"line 3: ends at 2.0 s, not after its start 2.0 s \(end <= start\)"),
    ("audio/long2.wav,3.0,2.0,x1,a,b", r"line 3: .*end <= start"),
    ("audio/long2.wav,-1,2.0,x1,a,b", r"line 3: starts at -1.0 s"),
    ("audio/long2.wav,abc,2.0,x1,a,b", r"line 3: start is 'abc'"),
    ("audio/long2.wav,1.0,2.0,u1,a,b", r"segment id 'u1' is used twice: lines 2 and 3"),
    ("audio/missing.wav,1.0,2.0,x1,a,b", r"line 3: names the recording '.*missing.wav', which does not exist"),
    ("audio/long2.wav,6.5,7.5,x1,a,b", r"line 3: ends at 7.500 s, past the end of '.*long2.wav' \(7.000 s\)"),
])
def test_bad_segments_name_the_file_and_line(corpus, line, message):
    root, audio, _ = corpus
    bad = _csv(root / "bad.csv", ["audio/long1.flac,0.5,2.25,u1,hello,spk1", line])
    out = root / "bad.parquet"
    with pytest.raises(ValueError, match=message) as info:
        build_index([audio], str(out), segments=bad, executor="serial", show_progress=False)
    assert "bad.csv" in str(info.value)
    assert not out.exists()


def test_same_span_twice_and_missing_columns(corpus):
    root, audio, _ = corpus
    twice = _csv(root / "twice.csv", ["audio/long1.flac,0.5,2.25", "audio/long1.flac,0.5,2.25"], header="path,start,end")
    with pytest.raises(ValueError, match="lines 2 and 3 list the same segment"):
        build_index([audio], str(root / "o.parquet"), segments=twice, executor="serial", show_progress=False)
    nocol = _csv(root / "nocol.csv", ["audio/long1.flac,0.5"], header="path,start")
    with pytest.raises(ValueError, match=r"nocol.csv: has no column\(s\) \['end'\]"):
        build_index([audio], str(root / "o.parquet"), segments=nocol, executor="serial", show_progress=False)


def test_recording_outside_the_sources_is_named(corpus, tmp_path):
    root, audio, _ = corpus
    other = tmp_path / "other"
    other.mkdir()
    _recording(other / "x.wav", 2.0)
    segs = _csv(root / "o.csv", ["other/x.wav,0,1"], header="path,start,end")
    with pytest.raises(ValueError, match=r"o.csv line 2: .*x.wav', which is not among the indexed files"):
        build_index([audio], str(root / "o.parquet"), segments=segs, executor="serial", show_progress=False)


def test_files_are_probed_once_per_recording(corpus, monkeypatch):
    import audiotree.io.decode as decode

    opened = []
    real = decode._open_reader

    def counting(path, *args, **kwargs):
        opened.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(decode, "_open_reader", counting)
    _build(corpus)
    assert sorted(os.path.basename(p) for p in opened) == ["long1.flac", "long2.wav"]


def test_window_sampling_refuses_a_segment_index(corpus):
    from audiotree.sources import WindowConfig, create_windowed_audio_dataset

    out = _build(corpus)
    with pytest.raises(ValueError, match="is a segment index"):
        create_windowed_audio_dataset(corpus=Corpus(index=out), window=WindowConfig(duration=0.5), sample_rate=RATE)
    # Its transcripts do not change the reason: it is the segments, not the text, that windows cannot read.
    with pytest.raises(ValueError, match="is a segment index"):
        create_windowed_audio_dataset(corpus=Corpus(index=out, labels=["text"]), window=WindowConfig(duration=0.5),
                                      sample_rate=RATE)


def test_a_damaged_segment_index_is_refused(corpus, tmp_path):
    out = _build(corpus)
    table = pq.read_table(out)
    meta = table.schema.metadata
    pq.write_table(table.drop_columns(["recording"]).replace_schema_metadata(meta), tmp_path / "a.parquet")
    with pytest.raises(ValueError, match=r"a.parquet: the segment index has no \['recording'\] column"):
        open_index(tmp_path / "a.parquet")
    i = table.column_names.index("start")
    bad = table.set_column(i, "start", table.column("start").cast(pa.float32())).replace_schema_metadata(meta)
    pq.write_table(bad, tmp_path / "b.parquet")
    with pytest.raises(ValueError, match=r"b.parquet: segment column 'start' is float, expected double"):
        open_index(tmp_path / "b.parquet")
