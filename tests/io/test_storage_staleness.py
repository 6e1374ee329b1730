"""The staleness check of an index-backed dataset on S3 (moto on 127.0.0.1), requests counted at the server.

A logging proxy stands between s3fs and moto, so every ``HEAD`` the check makes
is seen: by default one per file per process however many items that file
gives, none under ``on_stale="trust"``. A file replaced on the server before its
first check is still refused; ``trust`` reads it as it is.
"""

from __future__ import annotations

import grain
import numpy as np
import pytest

from audiotree.index import StaleFileError, build_index, freshness
from audiotree.sources import Corpus, WindowConfig, create_audio_dataset, create_windowed_audio_dataset
from servers import moto_s3
from test_storage import SECRET, SYNC, _encode, _FaultProxy, _noise

# moto keeps one in-memory backend per process, shared by every server a test starts:
# this module's bucket has a name of its own.
BUCKET = "stale-bucket"
RATE = 16000
EPOCHS = 6


@pytest.fixture(scope="module")
def s3():
    """moto behind a logging proxy (no faults); the AWS variables point s3fs at the proxy."""
    with moto_s3(secret=SECRET, proxy=lambda port: _FaultProxy(port, every=0)) as server:
        server.fs.mkdir(BUCKET)
        yield {"fs": server.fs, "proxy": server.proxy}


@pytest.fixture(autouse=True)
def empty_memo():
    freshness.clear()
    yield
    freshness.clear()


def _upload(s3, folder: str, seconds=(1.5, 2.0)) -> list[str]:
    urls = []
    for n, length in enumerate(seconds):
        key = f"{BUCKET}/{folder}/f{n}.wav"
        s3["fs"].pipe(key, _encode(_noise(length, RATE, 1, n + 1), RATE, "WAV", "PCM_16"))
        urls.append(f"s3://{key}")
    return urls


def _index(s3, folder: str, tmp_path) -> str:
    out = tmp_path / f"{folder}.parquet"
    build_index({"g": [f"s3://{BUCKET}/{folder}"]}, out, executor="serial", show_progress=False, loudness=False)
    # s3fs answers info() from the listings it holds: forget them, as a process that did not build the index.
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    return str(out)


def _heads(proxy) -> dict[str, int]:
    """HEAD requests per S3 key since the log was last cleared."""
    with proxy.lock:
        log = list(proxy.log)
    counts: dict[str, int] = {}
    for method, path, _, _ in log:
        if method == "HEAD":
            counts[path] = counts.get(path, 0) + 1
    return counts


def _clear(proxy) -> None:
    with proxy.lock:
        proxy.log.clear()


def _dataset(index: str, *, on_stale: str = "raise"):
    return create_audio_dataset(corpus=Corpus(index=index, on_stale=on_stale), duration=0.25, sample_rate=RATE,
                                shuffle=False, num_epochs=EPOCHS)


def test_default_check_is_one_head_per_file_per_process(s3, tmp_path):
    urls = _upload(s3, "once")
    index = _index(s3, "once", tmp_path)
    ds = _dataset(index)
    _clear(s3["proxy"])
    items = [ds[i] for i in range(len(ds))]
    assert len(items) == EPOCHS * len(urls) and all(item is not None for item in items)
    assert _heads(s3["proxy"]) == {f"/{BUCKET}/once/f{n}.wav": 1 for n in range(len(urls))}
    assert freshness.entries() == len(urls)
    # A windowed dataset (many slots per file) shares the process's memo: no request at all now.
    windowed = create_windowed_audio_dataset(corpus=Corpus(index=index), window=WindowConfig(duration=0.25, hop=0.25, jitter=False), sample_rate=RATE,
                                             shuffle=False)
    assert len(windowed) > 2 * len(urls) and all(windowed[i] is not None for i in range(len(windowed)))
    assert sum(_heads(s3["proxy"]).values()) == len(urls)
    # clear() forgets: the next item of a file asks again.
    freshness.clear()
    ds[0]
    assert _heads(s3["proxy"])[f"/{BUCKET}/once/f0.wav"] == 2


def test_trust_makes_no_request(s3, tmp_path):
    _upload(s3, "trusted")
    ds = _dataset(_index(s3, "trusted", tmp_path), on_stale="trust")
    _clear(s3["proxy"])
    assert all(ds[i] is not None for i in range(len(ds)))
    assert _heads(s3["proxy"]) == {}
    assert freshness.entries() == 0


def test_a_file_changed_before_first_use_is_still_refused_and_trust_reads_it(s3, tmp_path):
    urls = _upload(s3, "changed")
    index = _index(s3, "changed", tmp_path)
    replaced = _noise(3.0, RATE, 1, 9)
    s3["fs"].pipe(f"{BUCKET}/changed/f0.wav", _encode(replaced, RATE, "WAV", "PCM_16"))  # after indexing
    with pytest.raises(StaleFileError) as info:
        _dataset(index)[0]
    assert info.value.file_path == urls[0] and "size changed" in str(info.value)
    skipping = _dataset(index, on_stale="skip")
    _clear(s3["proxy"])
    kept = [skipping[i] for i in range(len(skipping))]
    assert [item is None for item in kept] == [True, False] * EPOCHS
    # The stale outcome is remembered too: skipping costs no request per item (f1 is checked once).
    assert _heads(s3["proxy"]) == {f"/{BUCKET}/changed/f1.wav": 1}
    # trust reads the file as it is now, without a word: the row no longer describes it.
    trusted = create_audio_dataset(corpus=Corpus(index=index, on_stale="trust"), duration=None, sample_rate=RATE, shuffle=False)
    whole = [trusted[i] for i in range(len(trusted))]
    np.testing.assert_allclose(np.asarray(whole[0].waveform)[0, 0], replaced[:, 0], atol=1 / 32768)


def test_a_file_replaced_after_its_first_check_is_not_seen_by_that_process(s3, tmp_path):
    """The documented price of once per process: a replacement after the first check goes unnoticed until clear()."""
    _upload(s3, "later")
    ds = _dataset(_index(s3, "later", tmp_path))
    assert ds[0] is not None
    s3["fs"].pipe(f"{BUCKET}/later/f0.wav", _encode(_noise(3.0, RATE, 1, 9), RATE, "WAV", "PCM_16"))
    assert ds[2] is not None  # f0 again, remembered as fresh
    freshness.clear()
    with pytest.raises(StaleFileError):
        ds[4]


def test_a_failed_lookup_is_not_remembered(s3, tmp_path):
    _upload(s3, "gone")
    ds = _dataset(_index(s3, "gone", tmp_path), on_stale="skip")
    s3["fs"].rm(f"{BUCKET}/gone/f0.wav")
    _clear(s3["proxy"])
    assert ds[0] is None and ds[2] is None and ds[1] is not None
    assert _heads(s3["proxy"])[f"/{BUCKET}/gone/f0.wav"] >= 2  # asked again: a missing object is not cached
    assert freshness.entries() == 1  # f1 only


@pytest.mark.slow
def test_two_grain_workers_check_each_file_at_most_once_each(s3, tmp_path):
    urls = _upload(s3, "workers")
    ds = _dataset(_index(s3, "workers", tmp_path))
    _clear(s3["proxy"])
    it = iter(ds.to_iter_dataset(SYNC).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    try:
        items = list(it)
    finally:
        it.close()
    assert len(items) == EPOCHS * len(urls)
    heads = _heads(s3["proxy"])
    assert set(heads) == {f"/{BUCKET}/workers/f{n}.wav" for n in range(len(urls))}
    assert all(1 <= count <= 2 for count in heads.values()), heads  # one per worker process at most, not 6


def test_a_same_size_object_replaced_within_the_same_second_is_refused(s3, tmp_path, monkeypatch):
    # S3's LastModified has whole seconds: with size and time alone, another object of the same size written
    # within that second passed on_stale="raise" and was read as other audio. The ETag tells them apart.
    # Both writes land in the same second: the (fake) store's clock stands still for this test.
    import datetime

    import moto.s3.models

    second = datetime.datetime(2026, 1, 2, 3, 4, 5)
    monkeypatch.setattr(moto.s3.models, "utcnow", lambda: second)
    key = f"{BUCKET}/same/f0.wav"
    s3["fs"].pipe(key, _encode(_noise(1.5, RATE, 1, 1), RATE, "WAV", "PCM_16"))
    first = s3["fs"].info(key, refresh=True)
    index = _index(s3, "same", tmp_path)
    s3["fs"].pipe(key, _encode(_noise(1.5, RATE, 1, 2), RATE, "WAV", "PCM_16"))
    again = s3["fs"].info(key, refresh=True)
    assert (again["size"], again["LastModified"]) == (first["size"], first["LastModified"])
    assert again["ETag"] != first["ETag"]
    with pytest.raises(StaleFileError) as info:
        _dataset(index)[0]
    assert info.value.file_path == f"s3://{key}" and "version" in str(info.value)
