"""The staleness check's policies on local files and its per-process memo of remote files.

Local files are checked on every item (an edit during a run is caught at the
next item); remote files once per process, in a bounded memo that is never part
of a dataset. The requests saved on S3 are counted in tests/io/test_storage_staleness.py.
"""

from __future__ import annotations

import fsspec
import numpy as np
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.index import ON_STALE, StaleFileError, build_index, freshness
from audiotree.index.reader import check_on_stale
from audiotree.sources import Corpus, WindowConfig, create_audio_dataset, create_windowed_audio_dataset

RATE = 16_000


@pytest.fixture(autouse=True)
def empty_memo():
    freshness.clear()
    yield
    freshness.clear()


def _write(path, seconds, seed):
    data = np.random.default_rng(seed).uniform(-0.5, 0.5, int(seconds * RATE)).astype(np.float32)
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, data, RATE, subtype="PCM_16")
    return str(path)


@pytest.fixture
def indexed(tmp_path):
    a = tmp_path / "c" / "a.wav"
    _write(a, 2.0, 1)
    _write(tmp_path / "c" / "b.wav", 2.0, 2)
    out = tmp_path / "c.parquet"
    build_index(str(tmp_path / "c"), out, executor="serial", show_progress=False, loudness=False)
    return a, out


def test_trust_is_a_policy():
    assert "trust" in ON_STALE and check_on_stale("trust") == "trust"
    with pytest.raises(ValueError, match=r"on_stale must be one of \('raise', 'reprobe', 'skip', 'trust'\)"):
        check_on_stale("never")
    with pytest.raises(ValueError, match=r"on_stale='error' is now spelled on_stale='raise'"):
        check_on_stale("error")


def test_a_local_file_edited_during_a_run_is_caught_at_its_next_item(indexed):
    a, out = indexed
    ds = create_audio_dataset(corpus=Corpus(index=out), duration=0.5, sample_rate=RATE, shuffle=False, num_epochs=3)
    assert ds[0].filepath == [str(a)]
    _write(a, 1.0, 3)  # rewritten between two items of the same file
    with pytest.raises(StaleFileError, match="size changed"):
        ds[2]
    assert freshness.entries() == 0  # local files are never remembered


def test_trust_reads_a_changed_local_file_as_it_is(indexed):
    a, out = indexed
    _write(a, 1.0, 3)  # half its indexed length
    with pytest.raises(StaleFileError):
        create_audio_dataset(corpus=Corpus(index=out), duration=None, sample_rate=RATE, shuffle=False)[0]
    whole = create_audio_dataset(corpus=Corpus(index=out, on_stale="trust"), duration=None, sample_rate=RATE, shuffle=False)
    assert whole[0].filepath == [str(a)] and whole[0].waveform.shape == (1, 1, RATE)  # on disk now; the row says 2 s
    # The risk: what was planned from the row may not fit. A window past the new end fails, naming the file.
    windowed = create_windowed_audio_dataset(corpus=Corpus(index=out, on_stale="trust"), window=WindowConfig(duration=0.5, hop=0.5, jitter=False), sample_rate=RATE,
                                             shuffle=False)
    assert windowed[0].filepath == [str(a)]
    with pytest.raises(AudioReadError, match=r"a\.wav.*past the end.*says it lasts 2\.000 s"):
        [windowed[i] for i in range(len(windowed))]


def test_memo_is_bounded(monkeypatch):
    fs = fsspec.filesystem("memory")
    urls = []
    for n in range(5):
        fs.pipe(f"/freshness-test/{n}.wav", b"x" * (n + 1))
        urls.append(f"memory://freshness-test/{n}.wav")
    monkeypatch.setattr(freshness._outcomes, "max_entries", 3)  # the memo's bound, built from MAX_ENTRIES
    for url in urls:
        size, mtime = freshness.stat_of(url)
        assert freshness.stale_reason(url, size, mtime) is None
    assert freshness.entries() == 3
    assert freshness.stale_reason(urls[0], 1, 0).startswith("its modification time")
    assert freshness.entries() == 3


def test_is_remote_looks_at_the_container():
    assert freshness.is_remote("gs://b/a.wav") and freshness.is_remote("https://h/a.wav")
    assert freshness.is_remote("tar://a.wav?offset=512&size=10::s3://b/shard.tar")
    assert not freshness.is_remote("tar://a.wav?offset=512&size=10::/data/shard.tar")
    assert not freshness.is_remote("file:///data/a.wav") and not freshness.is_remote("/data/a.wav")
