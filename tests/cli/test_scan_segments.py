"""``audiotree scan`` of a segment index says segments and orders them by time; ``audiotree index --segments``
reports a recording without segments as one clean line (issue 37, item 10). Audio written by sox."""

from __future__ import annotations

import subprocess

import pytest

from audiotree.cli import main


def _sox(path, seconds, synth="pinknoise"):
    subprocess.run(["sox", "-n", "-r", "8000", "-b", "16", "-c", "1", str(path), "synth", str(seconds), synth,
                    "vol", "0.3"], check=True, capture_output=True)


@pytest.fixture(scope="module")
def meeting(tmp_path_factory):
    """A two-minute recording cut into three utterances by a Kaldi data directory, imported."""
    root = tmp_path_factory.mktemp("meeting")
    _sox(root / "rec.wav", 120)
    _sox(root / "other.wav", 3, "sine")
    data = root / "data"
    data.mkdir()
    (data / "wav.scp").write_text("rec rec.wav\n")
    (data / "segments").write_text("a rec 100.55 102.0\nb rec 11.71 13.5\nc rec 2.0 2.5\n")
    (data / "text").write_text("a LATE\nb EARLY\nc FIRST\n")
    assert main(["import", "kaldi", str(data), "--out", str(root / "c.parquet"), "--audio-root", str(root),
                 "--executor", "serial"]) == 0
    return root


def test_the_scan_of_a_segment_index_says_segments_and_sorts_by_time(meeting, capsys):
    capsys.readouterr()
    assert main(["scan", str(meeting / "c.parquet"), "--duration", "1", "--loudness"]) == 0
    out = capsys.readouterr().out
    assert "3 segments in 1 group(s): 3 readable" in out
    assert "1 segment(s) shorter than --duration 1 s" in out
    assert "3 segments, median" in out and "per segment" in out
    assert " files " not in out and "3 files" not in out and "'files' counts segments" not in out
    late, early = out.index("[100.550, 102.000) s"), out.index("[11.710, 13.500) s")
    assert early < late  # both at 100 %: ordered by start time, not as text


def test_a_recording_without_segments_is_one_clean_line(meeting, capsys):
    (meeting / "s.csv").write_text("path,start,end\nrec.wav,1,2\n")
    capsys.readouterr()
    code = main(["index", str(meeting / "rec.wav"), str(meeting / "other.wav"), "--segments", str(meeting / "s.csv"),
                 "--out", str(meeting / "s.parquet"), "--executor", "serial", "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert captured.err.strip().splitlines() == [
        f"warning: 1 indexed file(s) have no segment in {meeting / 's.csv'}; they are left out of the index."]
    assert "UserWarning" not in captured.err and ".py:" not in captured.err
