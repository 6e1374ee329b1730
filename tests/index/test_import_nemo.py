"""Importing NeMo manifests (JSON lines as NeMo's data scripts write them; audio written by sox at test time)."""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from audiotree.index import import_nemo, open_index
from audiotree.sources import Corpus, create_audio_dataset


def _sox(*args):
    subprocess.run(["sox", *args], check=True, capture_output=True)


def write_manifest(path, rows):
    # NeMo's scripts write `json.dumps(entry)` and a newline per utterance (ensure_ascii left at its default).
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


@pytest.fixture()
def nemo(tmp_path):
    """A long recording cut by offset/duration (manifest in ``manifests/``, audio in ``audio/``) and whole files."""
    audio = tmp_path / "audio"
    audio.mkdir()
    _sox("-n", "-r", "16000", "-b", "16", "-c", "1", str(audio / "meeting.wav"), "synth", "6", "pinknoise", "vol", "0.3")
    _sox("-n", "-r", "16000", "-b", "16", "-c", "1", str(audio / "u1.flac"), "synth", "1.5", "sine", "300")
    _sox("-n", "-r", "16000", "-b", "16", "-c", "1", str(audio / "u2.flac"), "synth", "2.25", "sine", "600")
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    write_manifest(manifests / "long.json", [
        {"audio_filepath": "../audio/meeting.wav", "offset": 0.5, "duration": 1.25, "text": "good morning",
         "speaker": "spk1", "lang": "en", "sample_rate": 16000},
        {"audio_filepath": "../audio/meeting.wav", "offset": 2.0, "duration": 2.5, "text": "let us begin",
         "speaker": "spk2", "lang": "en", "sample_rate": 16000},
        {"audio_filepath": "../audio/meeting.wav", "offset": 4.75, "duration": 1.0, "text": "über alles",
         "speaker": "spk1", "lang": "de", "sample_rate": 16000, "words": [{"w": "über", "t": 0.1}]},
    ])
    write_manifest(manifests / "whole.json", [
        {"audio_filepath": str(audio / "u1.flac"), "duration": 1.5, "text": "one", "speaker": "spk3"},
        {"audio_filepath": "../audio/u2.flac", "duration": 2.25, "text": "two", "speaker": "spk3"},
    ])
    return tmp_path


def _rows(index):
    ix = open_index(index)
    return list(zip([os.path.basename(p) for p in ix.paths()], ix.table.column("id").to_pylist(),
                    ix.table.column("recording").to_pylist(), np.round(ix.column("start"), 6).tolist(),
                    np.round(ix.column("end"), 6).tolist()))


def test_offsets_become_segments_and_fields_become_labels(nemo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path / "audio")  # relative paths start from the manifest's folder, not the cwd
    out = str(nemo / "long.parquet")
    report = import_nemo(str(nemo / "manifests" / "long.json"), out, executor="serial")
    assert report.rows == 3 and report.read == 1 and report.unreadable == 0
    assert sorted(_rows(out)) == [
        ("meeting.wav", "meeting-2000-4500", "meeting", 2.0, 4.5),
        ("meeting.wav", "meeting-4750-5750", "meeting", 4.75, 5.75),
        ("meeting.wav", "meeting-500-1750", "meeting", 0.5, 1.75),
    ]
    ix = open_index(out)
    kinds = {name: ix.meta["labels"][name]["kind"] for name in ix.label_names}
    assert kinds["text"] == "text" and kinds["speaker"] == "category" and kinds["lang"] == "category"
    assert "nemo_sample_rate" in kinds and "words" in kinds  # the index's own column name is kept under a prefix
    ds = create_audio_dataset(corpus=Corpus(index=out, labels=["text", "speaker"]), duration=None, shuffle=False,
                              sample_rate=16000)
    whole, _ = soundfile.read(str(nemo / "audio" / "meeting.wav"), dtype="float32")
    seen = {}
    for i in range(len(ds)):
        item = ds[i]
        start, end = float(ix.column("start")[i]), float(ix.column("end")[i])
        np.testing.assert_array_equal(item.waveform[0, 0], whole[round(start * 16000):round(end * 16000)])
        seen[item.extras["text"][0]] = round(start, 2)
    assert seen == {"good morning": 0.5, "let us begin": 2.0, "über alles": 4.75}
    words = ix.table.column("words").to_pylist()
    assert json.loads([w for w in words if w][0]) == [{"w": "über", "t": 0.1}]


def test_whole_file_lines_and_several_manifests_from_the_cli(nemo):
    from audiotree.cli import cli

    out = str(nemo / "both.parquet")
    result = CliRunner().invoke(cli, ["import", "nemo", str(nemo / "manifests" / "long.json"),
                                      str(nemo / "manifests" / "whole.json"), "--out", out, "--executor", "serial",
                                      "--no-loudness"])
    assert result.exit_code == 0, result.output
    assert "5 segments from 3 recordings; 0 unreadable" in result.output
    rows = sorted(_rows(out))
    assert rows[-2:] == [("u1.flac", "u1", "u1", 0.0, 1.5), ("u2.flac", "u2", "u2", 0.0, 2.25)]
    py = str(nemo / "py.parquet")
    import_nemo([str(nemo / "manifests" / "long.json"), str(nemo / "manifests" / "whole.json")], py,
                executor="serial", loudness=False)
    assert sorted(_rows(py)) == rows


@pytest.mark.parametrize("line, message", [
    ("not json", r"long.json line 4: is not JSON"),
    ('["a list"]', r"long.json line 4: is not a JSON object"),
    ('{"duration": 1.0, "text": "x"}', r"long.json line 4: audio_filepath is None"),
    ('{"audio_filepath": "../audio/nope.wav", "duration": 1.0}', r"line 4: audio_filepath names '.*nope.wav', which "
                                                                r"does not exist \(relative paths start from the "
                                                                r"manifest's folder\)"),
    ('{"audio_filepath": "../audio/meeting.wav", "duration": "long"}', r"line 4: duration is 'long', not a finite"),
    ('{"audio_filepath": "../audio/meeting.wav", "duration": 0}', r"line 4: duration is 0.0; it must be > 0"),
    ('{"audio_filepath": "../audio/meeting.wav", "offset": -1, "duration": 1}', r"line 4: offset is -1.0"),
    ('{"audio_filepath": "../audio/meeting.wav", "offset": 5.5, "duration": 2.0}',
     r"long.json line 4: ends at 7.500 s, past the end of '.*meeting.wav' \(6.000 s\)"),
])
def test_bad_lines_are_named(nemo, line, message):
    with open(nemo / "manifests" / "long.json", "a") as f:
        f.write(line + "\n")
    with pytest.raises(ValueError, match=message):
        import_nemo(str(nemo / "manifests" / "long.json"), str(nemo / "x.parquet"), executor="serial", loudness=False)
    assert not (nemo / "x.parquet").exists()


def test_the_parser_renames_what_clashes_with_its_own_columns_or_the_callers(tmp_path):
    # formats.nemo knows its own segment columns; the index's columns come from import_nemo (formats imports no index).
    from audiotree.formats.nemo import read_manifests

    _sox("-n", "-r", "16000", "-b", "16", "-c", "1", str(tmp_path / "a.wav"), "synth", "1", "sine", "440")
    write_manifest(tmp_path / "m.json", [{"audio_filepath": "a.wav", "duration": 1.0, "id": "x", "sample_rate": 8}])
    plain = read_manifests(tmp_path / "m.json")
    assert plain.columns["id"] == ["a"] and plain.columns["nemo_id"] == ["x"] and plain.columns["sample_rate"] == [8]
    reserved = read_manifests(tmp_path / "m.json", reserved={"sample_rate"})
    assert reserved.columns["nemo_sample_rate"] == [8] and "sample_rate" not in reserved.columns
