"""Segment lists and manifests mean what they say (issue 36): lhotse channels, transforms, recording ids and null
ids; CSV text that looks like numbers, byte-order marks, the lines errors name; segments of no sample; NIST
SPHERE files in wav.scp."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from audiotree.index import build_index, import_kaldi, import_lhotse, open_index
from audiotree.sources import Corpus, create_audio_dataset

RATE = 16000


def _sox(path, *synth, channels=1, seconds=3.0):
    subprocess.run(["sox", "-n", "-r", str(RATE), "-c", str(channels), "-b", "16", str(path), "synth", str(seconds),
                    *synth], check=True, capture_output=True)
    return str(path)


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _recording(rid, path, channels=1, seconds=3.0, **extra):
    return {"id": rid, "sources": [{"type": "file", "channels": list(range(channels)), "source": path}],
            "sampling_rate": RATE, "num_samples": int(RATE * seconds), "duration": seconds, **extra}


def _supervision(sid, rid, start=0.5, duration=1.0, channel=0, **extra):
    return {"id": sid, "recording_id": rid, "start": start, "duration": duration, "channel": channel, **extra}


# ------------------------------------------------------------------ lhotse
def test_a_supervision_on_one_channel_of_a_stereo_call_reads_that_channel(tmp_path):
    import gzip

    import soundfile

    from audiotree.index import export_lhotse

    call = _sox(tmp_path / "call.wav", "sine", "300", "sine", "900", channels=2)
    recs = _jsonl(tmp_path / "recordings.jsonl", [_recording("call", call, channels=2)])
    sups = _jsonl(tmp_path / "supervisions.jsonl", [_supervision("a", "call", start=0.5, channel=0),
                                                    _supervision("b", "call", start=1.5, channel=1),
                                                    _supervision("both", "call", start=2.0, channel=[0, 1])])
    out = tmp_path / "c.parquet"
    import_lhotse(recs, sups, out, executor="serial")
    ds = create_audio_dataset(corpus=Corpus(index=out), duration=None, sample_rate=RATE, shuffle=False)
    items = {str(open_index(out).table.column("id")[i]): ds[i] for i in range(3)}
    raw, _ = soundfile.read(call, dtype="float32")
    span = slice(int(0.5 * RATE), int(1.5 * RATE))
    np.testing.assert_array_equal(np.asarray(items["a"].waveform)[0, 0], raw[span, 0])
    span = slice(int(1.5 * RATE), int(2.5 * RATE))
    np.testing.assert_array_equal(np.asarray(items["b"].waveform)[0, 0], raw[span, 1])
    span = slice(int(2.0 * RATE), int(3.0 * RATE))
    np.testing.assert_allclose(np.asarray(items["both"].waveform)[0, 0], raw[span].mean(axis=1), atol=1e-6)
    ix = open_index(out, columns="all")
    assert ix.column("channels").tolist() == [1, 1, 2]
    profiles = [ix.profile(i) for i in range(3)]  # each segment's loudness is its own channel's
    assert all(p is not None and p.size for p in profiles)
    # Exported back, each supervision keeps its channel.
    _, exported = export_lhotse(out, tmp_path / "export")
    with gzip.open(exported, "rt") as f:
        assert [json.loads(line)["channel"] for line in f] == [0, 1, [0, 1]]


def test_a_segment_on_a_channel_its_file_lacks_is_refused_at_import(tmp_path):
    call = _sox(tmp_path / "call.wav", "sine", "300", "sine", "900", channels=2)
    with pytest.raises(ValueError, match=r"segments row 2: is on channel\(s\) \[2\] of '.*call\.wav', which has 2 "
                                         r"channel\(s\)"):
        build_index([call], tmp_path / "c.parquet", executor="serial", show_progress=False, loudness=False,
                    segments=[{"path": call, "start": 0.0, "end": 1.0},
                              {"path": call, "start": 1.0, "end": 2.0, "audio_channels": [2]}])


def test_a_recording_with_transforms_is_refused(tmp_path):
    audio = _sox(tmp_path / "r.wav", "sine", "440")
    speed = {"name": "Speed", "kwargs": {"factor": 1.1}}
    recs = _jsonl(tmp_path / "recordings.jsonl", [_recording("r_sp1.1", audio, transforms=[speed])])
    sups = _jsonl(tmp_path / "supervisions.jsonl", [_supervision("s", "r_sp1.1")])
    with pytest.raises(ValueError, match=r"recordings\.jsonl line 1: recording 'r_sp1\.1' has transforms \['Speed'\]"):
        import_lhotse(recs, sups, tmp_path / "c.parquet", loudness=False, executor="serial")


def test_two_cuts_naming_one_recording_id_as_two_files_are_refused(tmp_path):
    first, second = _sox(tmp_path / "one.wav", "sine", "440"), _sox(tmp_path / "two.wav", "sine", "880")

    def cut(cid, path):
        return {"id": cid, "start": 0.5, "duration": 1.0, "channel": 0, "supervisions": [],
                "recording": _recording("rec", path)}

    cuts = _jsonl(tmp_path / "cuts.jsonl", [cut("c1", first), cut("c2", second)])
    with pytest.raises(ValueError, match=r"cuts\.jsonl line 2: cut 'c2' names recording 'rec' as '.*two\.wav', but "
                                         r"line 1 named it '.*one\.wav'"):
        import_lhotse(cuts=cuts, out=tmp_path / "c.parquet", loudness=False, executor="serial")


def test_a_null_id_is_refused_not_read_as_none(tmp_path):
    audio = _sox(tmp_path / "r.wav", "sine", "440")
    recs = _jsonl(tmp_path / "recordings.jsonl", [_recording("r", audio)])
    sups = _jsonl(tmp_path / "supervisions.jsonl", [_supervision(None, "r")])
    with pytest.raises(ValueError, match=r"supervisions\.jsonl line 1: the supervision's 'id' is None"):
        import_lhotse(recs, sups, tmp_path / "c.parquet", loudness=False, executor="serial")


# ------------------------------------------------------------------ Kaldi
def test_a_byte_order_mark_is_not_part_of_the_first_recording_id(tmp_path):
    audio = _sox(tmp_path / "rec1.wav", "sine", "440")
    (tmp_path / "wav.scp").write_bytes(b"\xef\xbb\xbfrec1 " + audio.encode() + b"\n")
    (tmp_path / "segments").write_bytes(b"\xef\xbb\xbfutt1 rec1 0.0 1.0\n")
    import_kaldi(tmp_path, tmp_path / "c.parquet", loudness=False, executor="serial")
    ix = open_index(tmp_path / "c.parquet")
    assert ix.table.column("recording").to_pylist() == ["rec1"] and ix.table.column("id").to_pylist() == ["utt1"]


def test_a_nist_sphere_recording_in_wav_scp_is_indexed_and_read(tmp_path):
    audio = _sox(tmp_path / "rec1.sph", "sine", "440")
    (tmp_path / "wav.scp").write_text(f"rec1 {audio}\n")
    (tmp_path / "segments").write_text("utt1 rec1 0.5 1.5\n")
    import_kaldi(tmp_path, tmp_path / "c.parquet", loudness=False, executor="serial")
    ds = create_audio_dataset(corpus=Corpus(index=tmp_path / "c.parquet"), duration=None, sample_rate=RATE)
    item = ds[0]
    assert item.waveform.shape == (1, 1, RATE) and np.abs(np.asarray(item.waveform)).max() > 0.1


def test_a_recording_without_an_extension_is_named(tmp_path):
    audio = _sox(tmp_path / "rec1.wav", "sine", "440")
    os.rename(audio, tmp_path / "rec1")
    (tmp_path / "wav.scp").write_text(f"rec1 {tmp_path / 'rec1'}\n")
    with pytest.raises(ValueError, match=r"wav\.scp: recording 'rec1' \('.*rec1'\) has no file extension"):
        import_kaldi(tmp_path, tmp_path / "c.parquet", loudness=False, executor="serial")


# ------------------------------------------------------------------ segment lists
@pytest.fixture
def audio(tmp_path):
    return _sox(tmp_path / "long.wav", "sine", "440", seconds=6.0)


def _index(tmp_path, audio, segments, **kwargs):
    out = tmp_path / "s.parquet"
    build_index([audio], out, segments=str(segments), executor="serial", show_progress=False, loudness=False,
                **kwargs)
    return open_index(out)


def test_text_that_looks_like_numbers_stays_text(tmp_path, audio):
    csv = tmp_path / "segments.csv"
    csv.write_text(f"path,start,end,text,room\n{audio},0,1,007,007\n{audio},1,2,7,7\n{audio},2,3,0800,0800\n")
    ix = _index(tmp_path, audio, csv)
    assert ix.table.column("text").to_pylist() == ["007", "7", "0800"]
    assert ix.meta["labels"]["room"]["kind"] == "category"
    vocab = ix.vocabulary("room")
    assert [vocab[k] for k in ix.label_values("room").tolist()] == ["007", "7", "0800"]


def test_numbers_stay_numbers(tmp_path, audio):
    csv = tmp_path / "segments.csv"
    csv.write_text(f"path,start,end,snr,clean\n{audio},0,1,1.5,true\n{audio},1,2,0.25,false\n{audio},2,3,,true\n")
    ix = _index(tmp_path, audio, csv)
    assert ix.meta["labels"]["snr"] == {"kind": "numeric"}
    values = ix.label_values("snr").tolist()
    assert values[:2] == [1.5, 0.25] and values[2] != values[2]  # (an empty cell: NaN)
    assert ix.table.column("clean").type == __import__("pyarrow").bool_()


def test_excel_csv_with_a_byte_order_mark_keeps_ids_as_written(tmp_path, audio):
    csv = tmp_path / "segments.csv"
    csv.write_bytes(b"\xef\xbb\xbfid,path,start,end\n007," + audio.encode() + b",0,1\n010," + audio.encode()
                    + b",1,2\n")
    assert sorted(_index(tmp_path, audio, csv).table.column("id").to_pylist()) == ["007", "010"]


@pytest.mark.parametrize("layout", ["multi-line quoted field", "blank lines"])
def test_a_csv_error_names_the_line_the_record_is_on(tmp_path, audio, layout):
    csv = tmp_path / "segments.csv"
    first = f'{audio},0,1,"three\nwhole\nlines"\n' if layout == "multi-line quoted field" else f"{audio},0,1,x\n\n\n"
    csv.write_text(f"path,start,end,text\n{first}{audio},3,2,bad\n")  # the bad record is on line 5 either way
    with pytest.raises(ValueError, match=r"segments\.csv line 5: ends at 2\.0 s, not after its start 3\.0 s"):
        _index(tmp_path, audio, csv)


def test_a_segment_of_no_sample_is_refused_at_import(tmp_path, audio):
    csv = tmp_path / "segments.csv"
    csv.write_text(f"path,start,end\n{audio},0,1\n{audio},2.00001,2.00002\n")
    with pytest.raises(ValueError, match=r"segments\.csv line 3: spans 2\.00001 to 2\.00002 s, which holds no sample "
                                         r"of '.*long\.wav' at 16000 Hz"):
        _index(tmp_path, audio, csv)


def test_a_label_only_later_rows_have_is_kept(tmp_path, audio):
    out = tmp_path / "s.parquet"
    build_index([audio], out, executor="serial", show_progress=False, loudness=False,
                segments=[{"path": audio, "start": 0.0, "end": 1.0},
                          {"path": audio, "start": 1.0, "end": 2.0, "speaker": "ann"}])
    ix = open_index(out)
    vocab = ix.vocabulary("speaker")
    assert [None if k < 0 else vocab[k] for k in ix.label_values("speaker").tolist()] == [None, "ann"]
