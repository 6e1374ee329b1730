"""``storage_options=`` on the dataset builders, against moto's S3 server on 127.0.0.1.

The server's credentials and endpoint reach the builders only through
``storage_options`` (the AWS environment variables are removed for these
tests), so discovery, probing and every read in every worker must use them.
"""

from __future__ import annotations

import itertools

import grain
import numpy as np
import pytest

from audiotree.sources import (
    Corpus,
    WindowConfig,
    create_audio_dataset,
    create_balanced_audio_dataset,
    create_windowed_audio_dataset,
)
from servers import start_moto
from test_storage import SECRET, SYNC, upload_corpus

_AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL")
# moto keeps one in-memory backend per process, shared by every server a test starts:
# this module's bucket has a name of its own.
BUCKET = "options-bucket"


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1 holding two groups; its options reach s3fs explicitly only."""
    server, port = start_moto()
    import s3fs

    options = {"key": "testing", "secret": SECRET, "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}"}}
    try:
        fs = s3fs.S3FileSystem(**options, skip_instance_cache=True)
        local = tmp_path_factory.mktemp("s3options")
        upload_corpus(fs, BUCKET, local)
        yield {"local": local, "options": options}
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        server.stop()


@pytest.fixture
def options(s3, monkeypatch):
    """The server's credentials as storage options, with the AWS variables unset (also for workers)."""
    import s3fs

    for name in _AWS_VARS:
        monkeypatch.delenv(name, raising=False)
    # Without options a client would look for AWS itself: keep every request on loopback.
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3["options"]["client_kwargs"]["endpoint_url"])
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")  # no profile on this machine can help either
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3["options"]
    s3fs.S3FileSystem.clear_instance_cache()


def _waves(items) -> list[bytes]:
    return [np.asarray(x.waveform).tobytes() for x in items]


def test_without_options_there_are_no_credentials(options):
    # The check that the credentials are really gone: the same build fails without storage_options.
    with pytest.raises(Exception) as caught:
        create_audio_dataset(sources="s3://options-bucket/speech", sample_rate=16000, duration=0.5)
    assert "credentials" in str(caught.value).lower(), caught.value


def test_create_audio_dataset_reads_s3_with_storage_options_only(options, s3):
    local = create_audio_dataset(sources=str(s3["local"] / "speech"), sample_rate=16000, duration=0.5, num_epochs=1)
    remote = create_audio_dataset(sources="s3://options-bucket/speech", sample_rate=16000, duration=0.5, num_epochs=1,
                                  corpus=Corpus(storage_options=options))
    assert len(remote) == len(local) == 3
    assert _waves(remote[i] for i in range(3)) == _waves(local[i] for i in range(3))


def test_windowed_builder_reads_s3_with_storage_options(options, s3):
    window = WindowConfig(duration=0.5, hop=0.5)
    local = create_windowed_audio_dataset(sources=str(s3["local"] / "music"), window=window, sample_rate=16000,
                                          num_epochs=1)
    remote = create_windowed_audio_dataset(sources="s3://options-bucket/music", window=window, sample_rate=16000,
                                           num_epochs=1, corpus=Corpus(storage_options=options))
    assert len(remote) == len(local) > 2
    assert _waves(remote[i] for i in range(len(local))) == _waves(local[i] for i in range(len(local)))


@pytest.mark.slow
def test_balanced_mix_on_s3_with_two_workers_uses_the_options_in_every_worker(options, s3):
    def build(speech, music, **kw):
        return create_balanced_audio_dataset(sources={"speech": [speech], "music": [music]},
                                             weights={"speech": 0.7, "music": 0.3}, sample_rate=16000,
                                             duration=0.5, **kw)

    reference = list(itertools.islice(iter(build(str(s3["local"] / "speech"), str(s3["local"] / "music"))
                                           .to_iter_dataset(SYNC)), 12))
    remote = build("s3://options-bucket/speech", "s3://options-bucket/music", corpus=Corpus(storage_options=options))
    it = iter(remote.to_iter_dataset(SYNC).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
    try:
        got = [next(it) for _ in range(12)]
    finally:
        it.close()
    assert _waves(got) == _waves(reference)


def test_bad_storage_options_are_refused_and_secrets_stay_hidden(options):
    with pytest.raises(TypeError, match="storage_options must be a dict"):
        create_audio_dataset(sources="s3://options-bucket/speech", corpus=Corpus(storage_options=[("key", "x")]))
    with pytest.raises(Exception) as caught:
        create_audio_dataset(sources="s3://options-bucket/nothing-here", sample_rate=16000, duration=0.5,
                             corpus=Corpus(storage_options=options))
    assert "s3://options-bucket/nothing-here" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_remote_parquet_reads_with_the_nested_options_the_docs_show(options, s3, tmp_path):
    # {"key", "secret", "client_kwargs": {...}} (docs/storage.md): the nested dict once broke the Parquet footer
    # cache's key (TypeError: unhashable type: 'dict').
    import pyarrow as pa
    import pyarrow.parquet as pq
    import s3fs

    names = sorted(p.name for p in (s3["local"] / "speech").iterdir())
    table = pa.table({"audio": [{"bytes": (s3["local"] / "speech" / n).read_bytes(), "path": n} for n in names]})
    pq.write_table(table, tmp_path / "train-0.parquet", row_group_size=2)
    s3fs.S3FileSystem(**options, skip_instance_cache=True).put_file(str(tmp_path / "train-0.parquet"),
                                                                     f"{BUCKET}/parquet/train-0.parquet")
    local = create_audio_dataset(sources=str(tmp_path / "train-0.parquet"), sample_rate=16000, duration=0.5,
                                 num_epochs=1, shuffle=False)
    remote = create_audio_dataset(sources=f"s3://{BUCKET}/parquet/train-0.parquet", sample_rate=16000, duration=0.5,
                                  num_epochs=1, shuffle=False, corpus=Corpus(storage_options=options))
    assert len(remote) == len(local) == 3
    assert _waves(remote[i] for i in range(3)) == _waves(local[i] for i in range(3))
