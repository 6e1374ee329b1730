"""The per-process memo of open-time integrity checks (issue 27)."""

from __future__ import annotations

import os

import numpy as np
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.io import AudioFile, open_checks
from audiotree.io import decode


@pytest.fixture(autouse=True)
def _fresh_memo():
    open_checks.clear()
    yield
    open_checks.clear()


def _count_checks(monkeypatch) -> list:
    calls = []
    real = decode._check_length_claim

    def counting(path, size, reader):
        calls.append(path)
        return real(path, size, reader)

    monkeypatch.setattr(decode, "_check_length_claim", counting)
    return calls


def _ogg(path, seconds=2.0, rate=16000):
    tone = 0.2 * np.sin(2 * np.pi * 440 * np.arange(int(rate * seconds)) / rate)
    soundfile.write(path, tone.astype(np.float32), rate, format="OGG", subtype="VORBIS")
    return str(path)


def test_an_unchanged_file_is_checked_once_and_reads_the_same(tmp_path, monkeypatch):
    calls = _count_checks(monkeypatch)
    path = _ogg(tmp_path / "a.ogg")
    reads = []
    for _ in range(3):
        with AudioFile(path) as f:
            reads.append(f.read(100, 8000))
    assert len(calls) == 1
    np.testing.assert_array_equal(reads[0], reads[2])


def test_a_rewritten_file_is_checked_again_and_a_cut_one_refused(tmp_path, monkeypatch):
    calls = _count_checks(monkeypatch)
    path = _ogg(tmp_path / "a.ogg")
    AudioFile(path).close()
    data = open(path, "rb").read()
    with open(path, "wb") as out:  # same inode, shorter: the final Ogg page is gone
        out.write(data[: len(data) // 2])
    for _ in range(2):  # a failure is never remembered
        with pytest.raises(AudioReadError, match="truncated"):
            AudioFile(path)
    # Same size and inode, new mtime: checked again.
    before = len(calls)
    with open(path, "wb") as out:
        out.write(data)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    AudioFile(path).close()
    AudioFile(path).close()
    assert len(calls) == before + 1


def test_the_checks_result_on_the_reader_is_remembered(tmp_path):
    """An MP3 without a length header gets a length tolerance from the check; a memo hit keeps it."""
    path = str(tmp_path / "a.mp3")
    soundfile.write(path, (0.1 * np.random.default_rng(0).standard_normal(16000 * 2)).astype(np.float32), 16000,
                    format="MP3")
    slack = []
    for _ in range(2):
        with AudioFile(path) as f:
            slack.append(f._reader.length_slack)
    assert slack[0] == slack[1]


def test_the_memo_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(open_checks._passed, "max_entries", 2)  # the memo's bound, built from MAX_ENTRIES
    calls = _count_checks(monkeypatch)
    paths = [_ogg(tmp_path / f"{k}.ogg", seconds=0.5) for k in range(3)]
    for p in paths + paths[:1]:
        AudioFile(p).close()
    assert len(calls) == 4  # the first file was dropped when the third came in
