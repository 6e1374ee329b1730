"""Kaldi ``wav.scp`` decode-only pipes (flac, sox, ffmpeg, cat, sph2pipe): parsed, never run, read as the named file.

The audio is written by the tools themselves (sox, flac) at test time; every pipe in ``wav.scp`` is the form real
recipes use. A pipe that changes the audio (a sox effect, ffmpeg resampling, sph2pipe channel selection) is refused,
naming the line.
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest
import soundfile

from audiotree.formats.kaldi import read_data_dir
from audiotree.index import import_kaldi, open_index
from audiotree.sources import Corpus, create_audio_dataset


def _sox(*args):
    subprocess.run(["sox", *args], check=True, capture_output=True)


@pytest.fixture()
def recipe(tmp_path):
    """``tmp_path/audio`` holds a FLAC (by flac), a WAV and a stereo WAV (by sox) and a SPHERE file (by sox)."""
    audio = tmp_path / "audio"
    audio.mkdir()
    _sox("-n", "-r", "16000", "-b", "16", "-c", "1", str(audio / "a.wav"), "synth", "3", "sine", "300")
    subprocess.run(["flac", "-s", "-f", "-o", str(audio / "a.flac"), str(audio / "a.wav")], check=True)
    _sox("-n", "-r", "16000", "-b", "16", "-c", "1", str(audio / "b.wav"), "synth", "2.5", "pinknoise", "vol", "0.3")
    _sox("-n", "-r", "16000", "-b", "16", "-c", "1", str(audio / "c.sph"), "synth", "2", "sine", "500")
    _sox("-n", "-r", "16000", "-b", "16", "-c", "1", str(audio / "d.wav"), "synth", "2", "sine", "700")
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    (data / "segments").write_text("u1 A 0.10 1.20\nu2 A 1.50 2.90\nu3 B 0.00 2.00\nu4 C 0.25 1.75\nu5 D 0.5 1.5\n"
                                   "u6 E 0.0 1.0\n")
    (data / "text").write_text("u1 HELLO\nu2 WORLD\nu3 NOISE HERE\nu4 SPHERE\nu5 PLAIN CAT\nu6 FF\n")
    (data / "utt2spk").write_text("u1 s1\nu2 s1\nu3 s2\nu4 s3\nu5 s3\nu6 s1\n")
    return tmp_path, data


DECODE_ONLY = [
    "A flac -c -d -s audio/a.flac |",
    "B sox audio/b.wav -t wav - |",
    "C sph2pipe -f wav audio/c.sph |",
    "D cat audio/d.wav |",
    "E ffmpeg -nostdin -loglevel error -i audio/a.flac -f wav - |",
]
PLAIN = ["A audio/a.flac", "B audio/b.wav", "C audio/c.sph", "D audio/d.wav", "E audio/a.flac"]


def test_decode_only_pipes_are_read_as_their_files(recipe):
    root, data = recipe
    (data / "wav.scp").write_text("\n".join(DECODE_ONLY) + "\n")
    out = str(root / "piped.parquet")
    report = import_kaldi(str(data), out, audio_root=root, executor="serial", loudness=False)
    assert report.rows == 6 and report.unreadable == 0
    plain = data.parent / "plain"
    plain.mkdir()
    for name in ("segments", "text", "utt2spk"):
        (plain / name).write_text((data / name).read_text())
    (plain / "wav.scp").write_text("\n".join(PLAIN) + "\n")
    ref = str(root / "plain.parquet")
    import_kaldi(str(plain), ref, audio_root=root, executor="serial", loudness=False)
    a, b = open_index(out), open_index(ref)
    assert a.paths() == b.paths()
    assert a.table.column("id").to_pylist() == b.table.column("id").to_pylist()
    ds = create_audio_dataset(corpus=Corpus(index=out, labels=["text"]), duration=None, shuffle=False,
                              sample_rate=16000)
    for i in range(len(ds)):
        item = ds[i]
        path, start, end = a.paths()[i], a.column("start")[i], a.column("end")[i]
        expected, _ = soundfile.read(path, start=round(start * 16000), stop=round(end * 16000), dtype="float32")
        np.testing.assert_array_equal(item.waveform[0, 0], expected)
    texts = [ds[i].extras["text"][0] for i in range(len(ds))]
    assert sorted(texts) == ["FF", "HELLO", "NOISE HERE", "PLAIN CAT", "SPHERE", "WORLD"]


@pytest.mark.parametrize("entry, message", [
    ("B sox audio/b.wav -t wav - remix 1 |", r"line 2: recording 'B' .*sox applies the effect\(s\) 'remix 1'"),
    ("B sox audio/b.wav -t wav - rate 8000 |", r"line 2: .*effect\(s\) 'rate 8000'"),
    ("B sox audio/b.wav -r 8000 -t wav - |", r"line 2: .*sox option '-r'"),
    ("B sox audio/b.wav -t wav - | sox - -t wav - vol 2 |", r"line 2: .*chains several commands"),
    ("B ffmpeg -i audio/b.wav -ar 8000 -f wav - |", r"line 2: .*ffmpeg option '-ar'"),
    ("B ffmpeg -i audio/b.wav -af volume=2 -f wav - |", r"line 2: .*ffmpeg option '-af'"),
    ("B sph2pipe -f wav -c 1 audio/c.sph |", r"line 2: .*sph2pipe option '-c'"),
    ("B flac -c -s audio/a.flac |", r"line 2: .*flac without -d encodes"),
    ("B cat audio/a.wav audio/b.wav |", r"line 2: .*cat should read exactly one file"),
    ("B gunzip -c audio/b.wav.gz |", r"line 2: .*'gunzip' is not one of the decoders"),
    ("B sox audio/b.wav -t wav - |; touch RAN |", r"line 2: .*(chains|quoting)"),
])
def test_pipes_that_change_the_audio_are_refused_with_the_line(recipe, entry, message):
    root, data = recipe
    (data / "wav.scp").write_text(f"A audio/a.wav\n{entry.replace('RAN', str(root / 'ran'))}\n"
                                  "C audio/c.sph\nD audio/d.wav\nE audio/a.wav\n")
    with pytest.raises(ValueError, match=message) as caught:
        read_data_dir(str(data), audio_root=root)
    assert "never runs commands" in str(caught.value) and "Run this command once" in str(caught.value)
    assert not (root / "ran").exists()


def test_a_sphere_file_libsndfile_cannot_decode_is_refused_by_sph2pipe_line(recipe):
    root, data = recipe
    # A shorten-compressed SPHERE header over sox's samples: libsndfile does not implement shorten.
    raw = bytearray((root / "audio" / "c.sph").read_bytes())
    old, new = b"sample_coding -s3 pcm\n", b"sample_coding -s26 pcm,embedded-shorten-v2.00\n"
    at = raw.index(old)
    raw[at:at + len(new)] = new
    (root / "audio" / "s.sph").write_bytes(bytes(raw))
    (data / "wav.scp").write_text("A audio/a.wav\nB audio/b.wav\nC sph2pipe -f wav -p audio/s.sph |\n"
                                  "D audio/d.wav\nE audio/a.wav\n")
    with pytest.raises(ValueError, match=r"wav.scp line 3: recording 'C' is read by sph2pipe .*s.sph.*libsndfile "
                                         r"cannot decode.*sph2pipe -f wav FILE OUT.wav"):
        read_data_dir(str(data), audio_root=root)


def test_cli_reads_a_piped_data_dir(recipe):
    from audiotree.cli import main

    root, data = recipe
    (data / "wav.scp").write_text("\n".join(DECODE_ONLY) + "\n")
    cwd = os.getcwd()
    os.chdir(root)  # relative wav.scp paths start from the folder Kaldi runs in
    try:
        assert main(["import", "kaldi", str(data), "--out", "c.parquet", "--executor", "serial",
                     "--no-loudness"]) == 0
    finally:
        os.chdir(cwd)
    assert len(open_index(str(root / "c.parquet"))) == 6
