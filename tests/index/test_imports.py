"""Importing Kaldi data directories and lhotse manifests (fixtures written by lhotse itself), exporting to lhotse,
and the round trip."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from audiotree.index import export_lhotse, import_kaldi, import_lhotse, open_index
from audiotree.sources import Corpus, create_audio_dataset

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "corpora")
sys.path.insert(0, os.path.abspath(DATA))
from corpus_audio import write_recordings  # noqa: E402

BENCH_PYTHON = "/work/benchvenv-i23/bin/python"


@pytest.fixture()
def kaldi_dir(tmp_path):
    write_recordings(str(tmp_path))
    shutil.copytree(os.path.join(DATA, "kaldi", "data"), tmp_path / "data")
    return tmp_path, str(tmp_path / "data" / "train")


@pytest.fixture()
def lhotse_dir(tmp_path):
    write_recordings(str(tmp_path))
    return tmp_path, os.path.join(DATA, "lhotse")


def _segments(index):
    ix = open_index(index)
    labels = {}
    for name in ix.label_names:
        if ix.meta["labels"][name]["kind"] == "text":
            labels[name] = ix.table.column(name).to_pylist()
            continue
        vocab = ix.vocabulary(name)
        labels[name] = [None if v < 0 else vocab[v] for v in ix.label_values(name).tolist()]
    rows = []
    for i, (p, sid, rec, s, e) in enumerate(zip(ix.paths(), ix.table.column("id").to_pylist(),
                                                ix.table.column("recording").to_pylist(), ix.column("start"),
                                                ix.column("end"))):
        rows.append((os.path.basename(p), sid, rec, round(float(s), 6), round(float(e), 6),
                     *(labels[n][i] for n in sorted(labels) if n != "language")))
    return sorted(rows)


def test_kaldi_import(kaldi_dir):
    root, data = kaldi_dir
    out = str(root / "corpus.parquet")
    report = import_kaldi(data, out, audio_root=root, executor="serial")
    assert report.rows == 5 and report.read == 2
    assert _segments(out) == [
        ("rec1.wav", "spk1-utt1", "rec1", 0.0, 1.25, "f", "spk1", "HELLO THERE"),
        ("rec1.wav", "spk1-utt2", "rec1", 1.5, 3.7, "f", "spk1", "THE QUICK BROWN FOX"),
        ("rec1.wav", "spk2-utt1", "rec1", 3.7, 6.0, "m", "spk2", "JUMPS OVER"),
        ("rec2.flac", "spk1-utt3", "rec2", 2.5, 4.5, "f", "spk1", "GOOD BYE"),
        ("rec2.flac", "spk2-utt2", "rec2", 0.35, 2.05, "m", "spk2", "THE LAZY DOG"),
    ]
    # Transcripts are text labels (strings in items), speakers categories.
    assert open_index(out).meta["labels"]["text"] == {"kind": "text"}
    assert open_index(out).meta["labels"]["speaker"]["kind"] == "category"
    ds = create_audio_dataset(corpus=Corpus(index=out, labels=["speaker"]), duration=None, shuffle=False, sample_rate=16000)
    ix = open_index(out)
    for i in range(len(ds)):
        ref, _ = soundfile.read(ix.paths()[i], start=round(ix.column("start")[i] * 16000),
                                stop=round(ix.column("end")[i] * 16000), dtype="float32")
        np.testing.assert_array_equal(ds[i].waveform[0, 0], ref)


def test_kaldi_without_segments_is_one_utterance_per_recording(kaldi_dir):
    root, data = kaldi_dir
    for name in ("segments", "text", "utt2spk", "spk2gender"):
        os.remove(os.path.join(data, name))
    out = str(root / "c.parquet")
    import_kaldi(data, out, audio_root=root, executor="serial", loudness=False)
    assert _segments(out) == [("rec1.wav", "rec1", "rec1", 0.0, 6.0), ("rec2.flac", "rec2", "rec2", 0.0, 4.5)]


@pytest.mark.parametrize("entry, message", [
    ("rec3 sox audio/rec1.wav -t wav - |", r"wav.scp line 3: recording 'rec3' is a command pipe .* never runs"),
    ("rec3 flac -c -d -s audio/rec2.flac | sox - -t wav - |", r"wav.scp line 3: .*command pipe"),
    ("rec3 ffmpeg -i audio/rec1.wav -ar 8000 -f wav - |", r"wav.scp line 3: .*command pipe .*ffmpeg option '-ar'"),
    ("rec3 data/raw.ark:1234", r"wav.scp line 3: recording 'rec3' points into an archive"),
    ("rec3 audio/nope.wav", r"wav.scp line 3: recording 'rec3' names '.*nope.wav', which does not exist"),
    ("rec1 audio/rec2.flac", r"wav.scp line 3: recording 'rec1' was already given on line 1"),
])
def test_kaldi_bad_wav_scp_names_the_line_and_runs_nothing(kaldi_dir, entry, message, tmp_path):
    root, data = kaldi_dir
    marker = tmp_path / "ran"
    with open(os.path.join(data, "wav.scp"), "a") as f:
        f.write(entry.replace("sox", f"touch {marker}; sox") + "\n")
    with pytest.raises(ValueError, match=message):
        import_kaldi(data, str(root / "c.parquet"), audio_root=root, executor="serial")
    assert not marker.exists()
    assert not (root / "c.parquet").exists()


@pytest.mark.parametrize("name, line, message", [
    ("segments", "bad-utt rec9 0.0 1.0", r"segments line 6: utterance 'bad-utt' is in recording 'rec9', which wav.scp"),
    ("segments", "spk1-utt1 rec2 0.0 1.0", r"segment id 'spk1-utt1' is used twice: lines 1 and 6"),
    ("segments", "x rec2 2.0 1.0", r"segments line 6: ends at 1.0 s, not after its start 2.0 s"),
    ("segments", "x rec2 3.0 9.0", r"segments line 6: ends at 9.000 s, past the end of '.*rec2.flac' \(4.500 s\)"),
    ("segments", "x rec2 1.0", r"segments line 6: needs '<utterance-id> <recording-id> <start> <end>'"),
    ("text", "ghost-utt SOME WORDS", r"text line 6: utterance 'ghost-utt' is not in the data directory"),
    ("spk2gender", "spk3 x", r"spk2gender line 3: gender of 'spk3' is 'x'"),
])
def test_kaldi_bad_files_name_the_line(kaldi_dir, name, line, message):
    root, data = kaldi_dir
    with open(os.path.join(data, name), "a") as f:
        f.write(line + "\n")
    with pytest.raises(ValueError, match=message):
        import_kaldi(data, str(root / "c.parquet"), audio_root=root, executor="serial", loudness=False)


def test_kaldi_cli_matches_python(kaldi_dir):
    from audiotree.cli import cli

    root, data = kaldi_dir
    py = str(root / "py.parquet")
    import_kaldi(data, py, audio_root=root, executor="serial")
    out = str(root / "cli.parquet")
    result = CliRunner().invoke(cli, ["import", "kaldi", data, "--out", out, "--audio-root", str(root), "--executor",
                                      "serial"])
    assert result.exit_code == 0, result.output
    assert "5 segments from 2 recordings" in result.output
    assert _segments(py) == _segments(out)
    piped = root / "data" / "piped"
    shutil.copytree(data, piped)
    (piped / "wav.scp").write_text("rec1 sox audio/rec1.wav -t wav - rate 8000 |\n")
    from audiotree.cli import main

    assert main(["import", "kaldi", str(piped), "--out", str(root / "x.parquet")]) == 2


LHOTSE_EXPECTED = [
    ("rec1.wav", "rec1-sup1", "rec1", 0.0, 1.25, "f", "spk1", "HELLO THERE"),
    ("rec1.wav", "rec1-sup2", "rec1", 1.5, 3.7, "f", "spk1", "THE QUICK BROWN FOX"),
    ("rec1.wav", "rec1-sup3", "rec1", 3.7, 6.0, "m", "spk2", "JUMPS OVER"),
    ("rec2.flac", "rec2-sup1", "rec2", 0.35, 2.05, "m", "spk2", "THE LAZY DOG"),
    ("rec2.flac", "rec2-sup2", "rec2", 2.5, 4.5, "f", "spk1", "GOOD BYE"),
]


def test_lhotse_import_of_manifests_written_by_lhotse(lhotse_dir):
    root, fixtures = lhotse_dir
    out = str(root / "corpus.parquet")
    import_lhotse(os.path.join(fixtures, "recordings.jsonl.gz"), os.path.join(fixtures, "supervisions.jsonl.gz"),
                  out, audio_root=root, executor="serial")
    assert _segments(out) == LHOTSE_EXPECTED
    assert open_index(out).vocabulary("language") == ["English"]


def test_lhotse_import_of_a_cutset(lhotse_dir):
    root, fixtures = lhotse_dir
    out = str(root / "cuts.parquet")
    import_lhotse(out=out, cuts=os.path.join(fixtures, "cuts.jsonl.gz"), audio_root=root, executor="serial",
                  loudness=False)
    rows = _segments(out)
    # trim_to_supervisions: one cut per supervision, same bounds and labels (cut ids are lhotse's own).
    assert [r[:1] + r[2:] for r in rows] == sorted(r[:1] + r[2:] for r in LHOTSE_EXPECTED)


def test_lhotse_cli_and_round_trip(lhotse_dir, tmp_path):
    from audiotree.cli import cli

    root, fixtures = lhotse_dir
    first = str(root / "first.parquet")
    result = CliRunner().invoke(cli, ["import", "lhotse", os.path.join(fixtures, "recordings.jsonl.gz"),
                                      os.path.join(fixtures, "supervisions.jsonl.gz"), "--out", first,
                                      "--audio-root", str(root), "--executor", "serial"])
    assert result.exit_code == 0, result.output
    out_dir = tmp_path / "exported"
    result = CliRunner().invoke(cli, ["export", "lhotse", first, str(out_dir)])
    assert result.exit_code == 0, result.output
    second = str(root / "second.parquet")
    import_lhotse(out_dir / "recordings.jsonl.gz", out_dir / "supervisions.jsonl.gz", second, executor="serial")
    assert _segments(first) == _segments(second) == LHOTSE_EXPECTED
    with gzip.open(out_dir / "supervisions.jsonl.gz", "rt") as f:
        first_sup = json.loads(f.readline())
    assert first_sup["text"] == "HELLO THERE" and first_sup["language"] == "English"
    if os.path.exists(BENCH_PYTHON):  # lhotse itself reads the export (the benchmark venv, when present)
        check = ("import lhotse, sys; r = lhotse.load_manifest(sys.argv[1]); s = lhotse.load_manifest(sys.argv[2]); "
                 "lhotse.validate_recordings_and_supervisions(r, s); print(len(r), len(s), r['rec1'].duration)")
        done = subprocess.run([BENCH_PYTHON, "-c", check, str(out_dir / "recordings.jsonl.gz"),
                               str(out_dir / "supervisions.jsonl.gz")], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["2", "5", "6.0"]


def test_kaldi_to_lhotse_round_trip(kaldi_dir, tmp_path):
    root, data = kaldi_dir
    first = str(root / "k.parquet")
    import_kaldi(data, first, audio_root=root, executor="serial", loudness=False)
    export_lhotse(first, tmp_path / "out")
    second = str(root / "l.parquet")
    import_lhotse(tmp_path / "out" / "recordings.jsonl.gz", tmp_path / "out" / "supervisions.jsonl.gz", second,
                  executor="serial", loudness=False)
    assert _segments(first) == _segments(second)


@pytest.mark.parametrize("edit, message", [
    (lambda r: r["sources"][0].update(type="command", source="sox audio/rec1.wav -t wav - remix 1"),
     r"recordings.jsonl line 1: recording 'rec1' is a shell command .*effect\(s\) 'remix 1'.* never runs"),
    (lambda r: r["sources"][0].update(type="url", source="https://example.com/a.wav"), r"line 1: .*'url' source"),
    (lambda r: r.update(sources=r["sources"] * 2), r"line 1: recording 'rec1' is split over 2 sources"),
])
def test_lhotse_bad_recordings(lhotse_dir, tmp_path, edit, message):
    root, fixtures = lhotse_dir
    with gzip.open(os.path.join(fixtures, "recordings.jsonl.gz"), "rt") as f:
        records = [json.loads(line) for line in f]
    edit(records[0])
    path = tmp_path / "recordings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError, match=message):
        import_lhotse(path, os.path.join(fixtures, "supervisions.jsonl.gz"), str(tmp_path / "o.parquet"),
                      audio_root=root, executor="serial")


@pytest.mark.parametrize("command", ["sox audio/rec1.wav -t wav -", "sox audio/rec1.wav -t wav - |"])
def test_lhotse_decode_only_command_sources_are_read_as_their_file(lhotse_dir, tmp_path, command):
    root, fixtures = lhotse_dir
    with gzip.open(os.path.join(fixtures, "recordings.jsonl.gz"), "rt") as f:
        records = [json.loads(line) for line in f]
    assert records[0]["id"] == "rec1"
    records[0]["sources"][0].update(type="command", source=command)  # what lhotse's Kaldi import writes for a pipe
    path = tmp_path / "recordings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = str(tmp_path / "o.parquet")
    import_lhotse(path, os.path.join(fixtures, "supervisions.jsonl.gz"), out, audio_root=root, executor="serial")
    assert _segments(out) == LHOTSE_EXPECTED


def test_lhotse_bad_supervisions(lhotse_dir, tmp_path):
    root, fixtures = lhotse_dir
    with gzip.open(os.path.join(fixtures, "supervisions.jsonl.gz"), "rt") as f:
        records = [json.loads(line) for line in f]
    records.append(dict(records[0], id="extra", recording_id="rec9"))
    path = tmp_path / "sup.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError, match=r"sup.jsonl line 6: supervision 'extra' is in recording 'rec9'"):
        import_lhotse(os.path.join(fixtures, "recordings.jsonl.gz"), path, str(tmp_path / "o.parquet"),
                      audio_root=root, executor="serial")
    records[-1] = dict(records[0])  # the same id twice
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError, match=r"segment id 'rec1-sup1' is used twice: lines 1 and 6"):
        import_lhotse(os.path.join(fixtures, "recordings.jsonl.gz"), path, str(tmp_path / "o.parquet"),
                      audio_root=root, executor="serial")
