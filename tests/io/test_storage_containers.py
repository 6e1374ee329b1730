"""Tar shards and Parquet with embedded audio on object storage: moto's S3 server, gcp-storage-emulator's GCS
and an HTTP server honouring Range, all on 127.0.0.1.

Items equal the local unpacked folder's; an excerpt costs a few ranged
requests counted at the server, never a whole shard.
"""

from __future__ import annotations

import itertools
import json
import tarfile

import grain
import numpy as np
import pytest

from audiotree import ExcerptConfig
from audiotree.errors import AudioReadError
from audiotree.index import build_index, open_index
from audiotree.io import AudioFile, remote_file, storage
from audiotree.io.members import parse, tar_url
from audiotree.io.tar_shards import list_shard
from audiotree.sources import Corpus, create_audio_dataset
from container_factories import RATE, add_member, flac_bytes, make_corpus
from servers import moto_s3
from test_storage import (  # noqa: F401 (the servers of the storage tests)
    GCS_OPTIONS,
    SECRET,
    _FaultProxy,
    gcs_environment,
    http_server,
    start_gcs_emulator,
)

SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


@pytest.fixture(scope="module")
def s3_corpus(tmp_path_factory):
    """The container corpus, local and in s3://shapes (moto on 127.0.0.1, standard AWS variables)."""
    local = make_corpus(tmp_path_factory.mktemp("s3shapes"), files=8, per_shard=2)
    with moto_s3(secret=SECRET) as server:
        fs = server.fs
        fs.mkdir("shapes")
        for folder in ("shards", "parquet", "parquet_hf"):
            for path in sorted(local[folder].iterdir()):
                fs.pipe(f"shapes/{folder}/{path.name}", path.read_bytes())
        yield local


def _sources(local) -> dict:
    last = local["num_shards"] - 1
    return {"folder": str(local["unpacked"]), "shards": f"s3://shapes/shards/train-{{000000..{last:06d}}}.tar",
            "parquet": "s3://shapes/parquet/train-*.parquet", "parquet_hf": "s3://shapes/parquet_hf/train-*.parquet"}


def _waves(ds) -> list:
    return [np.asarray(ds[i].waveform) for i in range(len(ds))]


def _same(a, b) -> None:
    assert len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("shape", ["shards", "parquet", "parquet_hf"])
def test_s3_containers_equal_the_local_folder(s3_corpus, shape):
    sources = _sources(s3_corpus)
    for build in (dict(duration=0.5, num_epochs=2, shuffle_seed=4), dict(duration=None, shuffle=False)):
        _same(_waves(create_audio_dataset(sources=sources[shape], sample_rate=RATE, **build)),
              _waves(create_audio_dataset(sources=sources["folder"], sample_rate=RATE, **build)))


def test_s3_index_over_shards_then_loudest_equals_the_local_folder(s3_corpus, tmp_path):
    sources = _sources(s3_corpus)
    waves = {}
    for shape in ("folder", "shards", "parquet"):
        out = tmp_path / f"{shape}.parquet"
        build_index(sources[shape], out, executor="serial", show_progress=False)
        waves[shape] = _waves(create_audio_dataset(corpus=Corpus(index=out), sample_rate=RATE, duration=0.25, num_epochs=1,
                                                   excerpt=ExcerptConfig(strategy="loudest")))
    _same(waves["shards"], waves["folder"])
    _same(waves["parquet"], waves["folder"])
    ix = open_index(tmp_path / "shards.parquet", columns="all")
    assert ix.table.column("speaker").to_pylist()[:3] == ["spk0", "spk1", "spk2"]  # sidecars read by ranged reads
    assert all(parse(p).container.startswith("s3://shapes/shards/") for p in ix.paths())


def test_s3_index_cli_with_a_brace_url(s3_corpus, tmp_path):
    from click.testing import CliRunner

    from audiotree.cli import cli

    out = tmp_path / "cli.parquet"
    result = CliRunner().invoke(cli, ["index", _sources(s3_corpus)["shards"], "--out", str(out), "--executor",
                                      "serial", "--no-progress", "--no-loudness"])
    assert result.exit_code == 0, result.output
    assert "8 rows (8 read" in result.output and "skipped 8 .jpg" in result.output


@pytest.mark.slow
def test_s3_shards_with_two_workers_and_resume_equal_the_local_folder(s3_corpus):
    sources = _sources(s3_corpus)
    build = dict(sample_rate=RATE, duration=0.5, num_epochs=None, shuffle_seed=6)
    reference = [np.asarray(x.waveform) for x in itertools.islice(
        iter(create_audio_dataset(sources=sources["folder"], **build).to_iter_dataset(SYNC)), 16)]
    ds = create_audio_dataset(sources=sources["shards"], **build)

    def stream(n, state=None):
        it = iter(ds.to_iter_dataset(SYNC).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
        try:
            if state is not None:
                it.set_state(state)
            return [np.asarray(next(it).waveform) for _ in range(n)], it.get_state()
        finally:
            it.close()

    head, state = stream(5)  # five items: the middle of the third shard
    tail, _ = stream(11, state)
    _same(head + tail, reference)


# ------------------------------------------------------------------ requests and bytes, counted at the server


@pytest.fixture(scope="module")
def http_shards(http_server):
    """The storage tests' HTTP server (honours Range, counts requests and bytes) serving two shards."""
    import io

    members = {f"long{i}": flac_bytes(20.0, 30 + i) for i in range(3)}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for key, data in members.items():
            add_member(tar, f"{key}.flac", data)
            add_member(tar, f"{key}.json", json.dumps({"k": key}).encode())
    http_server.objects["/shard.tar"] = buf.getvalue()
    http_server.objects["/cut.tar"] = buf.getvalue()[: len(buf.getvalue()) * 2 // 3]
    return http_server


def test_http_shard_excerpt_costs_few_requests_and_bytes(http_shards):
    listing = list_shard(http_shards.base + "/shard.tar")
    member = next(m for m in listing.members if m.name == "long1.flac")
    url = f"tar://{member.name}?offset={member.offset}&size={member.size}::{http_shards.base}/shard.tar"
    http_shards.reset_counters()
    with AudioFile(url) as f:
        got = f.read(10 * RATE, 3 * RATE)
    assert got.shape == (3 * RATE, 1) and np.abs(got).max() > 0
    excerpt_bytes = member.size * 3 / 20
    print(f"{http_shards.requests} requests, {http_shards.bytes_sent} bytes for a {excerpt_bytes:.0f}-byte excerpt")
    assert http_shards.requests <= 3, http_shards.requests
    assert http_shards.bytes_sent <= 2 * excerpt_bytes + remote_file.MIN_WINDOW, (http_shards.bytes_sent, excerpt_bytes)


def test_http_shard_listing_reads_headers_not_the_shard(http_shards):
    http_shards.reset_counters()
    listing = list_shard(http_shards.base + "/shard.tar")
    assert [m.name for m in listing.members] == [f"long{i}.{e}" for i in range(3) for e in ("flac", "json")]
    assert http_shards.bytes_sent < len(http_shards.objects["/shard.tar"]) / 10


def test_http_truncated_shard_member_is_named_on_read(http_shards):
    listing = list_shard(http_shards.base + "/cut.tar")
    member = listing.members[-1]
    assert member.name == "long2.flac"  # cut inside it
    url = f"tar://{member.name}?offset={member.offset}&size={member.size}::{http_shards.base}/cut.tar"
    with pytest.raises(AudioReadError, match=r"long2\.flac.*run past the end of the shard"):
        with AudioFile(url) as f:
            f.read(0, f.info.frames)


# ------------------------------------------------------------------ GCS: the emulator behind a counting proxy


@pytest.fixture(scope="module")
def gcs_corpus(tmp_path_factory):
    """The container corpus, local and in gs://shapes/shards (gcp-storage-emulator on 127.0.0.1), plus a
    shard of three 20 s members; gcsfs reaches the emulator through a proxy that logs every request."""
    local = make_corpus(tmp_path_factory.mktemp("gcsshapes"), files=8, per_shard=2)
    server, port = start_gcs_emulator("shapes")
    proxy = _FaultProxy(port, every=0)
    with pytest.MonkeyPatch.context() as mp:
        try:
            gcs_environment(mp, f"http://127.0.0.1:{proxy.port}")
            import gcsfs  # after gcs_environment, which sets a variable gcsfs reads on import

            fs = gcsfs.GCSFileSystem(**GCS_OPTIONS)
            for path in sorted(local["shards"].iterdir()):
                fs.pipe(f"shapes/shards/{path.name}", path.read_bytes())
            fs.pipe("shapes/long/shard.tar", _long_shard())
            yield {"local": local, "proxy": proxy, "options": dict(GCS_OPTIONS)}
        finally:
            import gcsfs

            gcsfs.GCSFileSystem.clear_instance_cache()
            proxy.stop()
            server.stop()


def _long_shard() -> bytes:
    import io

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for i in range(3):
            add_member(tar, f"long{i}.flac", flac_bytes(20.0, 40 + i))
            add_member(tar, f"long{i}.json", json.dumps({"k": i}).encode())
    return buf.getvalue()


def _gcs_shards(local) -> str:
    return f"gs://shapes/shards/train-{{000000..{local['num_shards'] - 1:06d}}}.tar"


def _local_shards(local) -> str:
    return str(local["shards"] / f"train-{{000000..{local['num_shards'] - 1:06d}}}.tar")


def _requests(proxy) -> list:
    with proxy.lock:
        return list(proxy.log)


def _forget_requests(proxy) -> None:
    with proxy.lock:
        proxy.log.clear()


def test_gcs_shards_equal_the_same_shards_locally(gcs_corpus):
    local, options = gcs_corpus["local"], gcs_corpus["options"]
    build = dict(sample_rate=RATE, duration=0.5, num_epochs=2, shuffle_seed=4)
    remote = create_audio_dataset(sources=_gcs_shards(local), corpus=Corpus(storage_options=options), **build)
    assert all(parse(x.filepath[0]).container.startswith("gs://shapes/shards/train-")
               for x in itertools.islice(iter(remote.to_iter_dataset(SYNC)), 3))
    waves = [np.asarray(x.waveform) for x in remote.to_iter_dataset(SYNC)]  # 0 workers
    _same(waves, _waves(create_audio_dataset(sources=_local_shards(local), **build)))
    _same(waves, _waves(create_audio_dataset(sources=str(local["unpacked"]), **build)))
    assert all(np.abs(w).max() > 0 for w in waves)


def test_gcs_index_over_brace_shards_equals_the_local_index(gcs_corpus, tmp_path):
    local, options = gcs_corpus["local"], gcs_corpus["options"]
    waves = {}
    for where, source in (("gcs", _gcs_shards(local)), ("local", _local_shards(local))):
        out = tmp_path / f"{where}.parquet"
        build_index(source, out, executor="serial", show_progress=False, storage_options=options)
        ds = create_audio_dataset(corpus=Corpus(index=out, storage_options=options), sample_rate=RATE, duration=0.25, num_epochs=1, shuffle_seed=2,
                                  excerpt=ExcerptConfig(strategy="loudest"))
        waves[where] = [np.asarray(x.waveform) for x in ds.to_iter_dataset(SYNC)]
    _same(waves["gcs"], waves["local"])
    ix = open_index(tmp_path / "gcs.parquet", columns="all")
    assert len(ix) == 8 and all(parse(p).container.startswith("gs://shapes/shards/train-") for p in ix.paths())
    assert ix.table.column("speaker").to_pylist()[:3] == ["spk0", "spk1", "spk2"]  # sidecars, by ranged reads


def test_gcs_shard_excerpt_costs_few_requests_and_bytes(gcs_corpus):
    proxy, options = gcs_corpus["proxy"], gcs_corpus["options"]
    shard = "gs://shapes/long/shard.tar"
    with storage.use_storage_options(options):
        _forget_requests(proxy)
        listing = list_shard(shard)
        listed = _requests(proxy)
        member = next(m for m in listing.members if m.name == "long1.flac")
        _forget_requests(proxy)
        with AudioFile(tar_url(shard, member.name, member.offset, member.size)) as f:
            got = f.read(10 * RATE, 3 * RATE)
        read = _requests(proxy)
    assert got.shape == (3 * RATE, 1) and np.abs(got).max() > 0
    shard_bytes = len(_long_shard())
    assert sum(n for *_, n in listed) < shard_bytes / 10, listed  # the listing reads headers, not the shard
    excerpt_bytes = member.size * 3 / 20
    print(f"{len(read)} requests, {sum(n for *_, n in read)} bytes for a {excerpt_bytes:.0f}-byte excerpt: {read}")
    assert len(read) <= 3, read
    assert sum(n for *_, n in read) <= 2 * excerpt_bytes + remote_file.MIN_WINDOW, read
