"""Ranged GETs answered with other bytes: moto (S3) on 127.0.0.1 behind a proxy that answers a share of the Range
requests with ``200`` and the whole object, or with a ``206`` for another range of the same length (both allowed
by HTTP, and what some proxies and caches do).

Every answer is checked against its request (status, ``Content-Range`` start and length): the range is sliced out
of a whole object, another range is retried. Items through the proxy equal the fault-free ones item for item, for
plain WAV and FLAC files, tar members, Parquet cells and raw arrays of a written dataset.
"""

from __future__ import annotations

import io
import re
import threading
from http.server import BaseHTTPRequestHandler

import numpy as np
import pytest
import soundfile

from audiotree.errors import AudioReadError
from container_factories import RATE, make_corpus
from servers import LoopbackServer, forward, moto_s3, request_body, request_headers, send_head
from test_storage import (  # noqa: F401 (http_server: the storage tests' HTTP server)
    GCS_OPTIONS,
    SECRET,
    gcs_environment,
    http_server,
    start_gcs_emulator,
)

# Three faults in every ten ranged GETs (30%), never two in a row: five attempts always get through.
PATTERN = ("full-200", None, None, "other-206", None, None, "other-206", None, "full-200", None)


class RangeFaultProxy(LoopbackServer):
    """An HTTP proxy 127.0.0.1 -> ``target_port`` that answers ranged GETs by ``pattern`` (cycled over them).

    ``"full-200"`` forwards the GET without its Range and sends the whole object
    with ``200``; ``"other-206"`` asks the server for a range of the same length
    shifted by :attr:`shift` bytes (or back, at the object's end) and sends that
    ``206`` answer, its ``Content-Range`` included. ``"always"`` mode gives every
    ranged GET the ``"other-206"`` answer. Other requests pass unchanged.
    """

    shift = 1000

    def __init__(self, target_port: int, pattern=PATTERN) -> None:
        self.pattern, self.ranged, self.lock = pattern, 0, threading.Lock()
        self.faults = {"full-200": 0, "other-206": 0}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _forward(self) -> None:
                body = request_body(self)
                headers = request_headers(self)
                wanted = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
                kind = None
                if self.command == "GET" and wanted is not None:
                    with proxy.lock:
                        kind = proxy.pattern[proxy.ranged % len(proxy.pattern)]
                        proxy.ranged += 1
                if kind == "full-200":
                    headers = {k: v for k, v in headers.items() if k.lower() != "range"}
                elif kind == "other-206":
                    first, last = int(wanted.group(1)), int(wanted.group(2))
                    headers = {k: v for k, v in headers.items() if k.lower() != "range"}
                    headers["Range"] = f"bytes={first + proxy.shift}-{last + proxy.shift}"
                resp, data = forward(self, target_port, headers, body)
                if kind == "other-206" and resp.status != 206:  # past the end: shift back instead, if possible
                    first, last = int(wanted.group(1)), int(wanted.group(2))
                    headers["Range"] = f"bytes={max(0, first - proxy.shift)}-{max(0, first - proxy.shift) + last - first}"
                    resp, data = forward(self, target_port, headers, body)
                    if first == 0 or resp.status != 206:
                        headers["Range"] = self.headers["Range"]
                        resp, data = forward(self, target_port, headers, body)
                        kind = None
                if kind == "full-200" and resp.status != 200:
                    kind = None
                if kind is not None:
                    with proxy.lock:
                        proxy.faults[kind] += 1
                send_head(self, resp, data)
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self.serve(Handler)


def _wav(data: bytes) -> bytes:
    audio, rate = soundfile.read(io.BytesIO(data), dtype="float32")
    buf = io.BytesIO()
    soundfile.write(buf, audio, rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.fixture(scope="module")
def s3_ranges(tmp_path_factory):
    """moto on 127.0.0.1 holding the container corpus (FLAC files, WAV files, tar shards, two Parquet layouts) and
    a raw float32 array under s3://ranges/; its port. Stopped after the module."""
    local = make_corpus(tmp_path_factory.mktemp("ranges"), files=8, per_shard=2)
    with moto_s3(secret=SECRET) as server:
        fs = server.fs
        fs.mkdir("ranges")
        for folder in ("unpacked", "shards", "parquet", "parquet_hf"):
            for path in sorted(local[folder].iterdir()):
                fs.pipe(f"ranges/{folder}/{path.name}", path.read_bytes())
                if folder == "unpacked":
                    fs.pipe(f"ranges/wav/{path.stem}.wav", _wav(path.read_bytes()))
        fs.pipe("ranges/raw/x.bin", np.arange(64 * 1024, dtype="<f4").tobytes())
        yield server.port


SOURCES = {"wav": "s3://ranges/wav", "flac": "s3://ranges/unpacked",
           "shards": "s3://ranges/shards/train-{000000..000003}.tar",
           "parquet": "s3://ranges/parquet/train-*.parquet", "parquet_hf": "s3://ranges/parquet_hf/train-*.parquet"}


def _items(source: str) -> list:
    """Each item of two shuffled epochs of 0.5 s excerpts (bytes), or the error it raised (all of them the error
    when the dataset could not be built)."""
    from audiotree.sources import create_audio_dataset

    try:
        ds = create_audio_dataset(sources=source, sample_rate=RATE, duration=0.5, num_epochs=2, shuffle_seed=3)
    except AudioReadError as exc:
        return [exc]
    out = []
    for i in range(len(ds)):
        try:
            out.append(np.asarray(ds[i].waveform).tobytes())
        except AudioReadError as exc:
            out.append(exc)
    return out


def _raw_rows() -> list:
    """Slices of 256-float rows of the raw array, read one ranged GET each (RemoteFolder / RemoteArray)."""
    from audiotree.io.ranges import RemoteArray, RemoteFolder

    array = RemoteArray(RemoteFolder("s3://ranges/raw"), "x.bin", "<f4", (256, 256), whole_below=0)
    out = []
    for i in range(0, 250, 7):
        try:
            out.append(array[i:i + 3].tobytes())
        except (AudioReadError, ValueError) as exc:
            out.append(exc)
    return out


def _everything() -> dict:
    import s3fs

    from audiotree.io import parquet_audio

    s3fs.S3FileSystem.clear_instance_cache()
    parquet_audio.forget()
    got = {name: _items(source) for name, source in SOURCES.items()}
    got["raw"] = _raw_rows()
    return got


@pytest.mark.slow
def test_whole_objects_and_other_ranges_for_30_percent_of_ranged_gets_give_the_fault_free_items(s3_ranges,
                                                                                                monkeypatch):
    clean = _everything()
    assert all(isinstance(x, bytes) for items in clean.values() for x in items)
    proxy = RangeFaultProxy(s3_ranges)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        faulty = _everything()
    finally:
        proxy.stop()
    reads = sum(len(items) for items in clean.values())
    wrong = {name: sum(isinstance(a, bytes) and a != b for a, b in zip(faulty[name], clean[name])) for name in clean}
    lost = {name: len(clean[name]) - sum(isinstance(a, bytes) for a in faulty[name]) for name in clean}
    assert proxy.faults["full-200"] > 20 and proxy.faults["other-206"] > 20, proxy.faults
    assert (sum(wrong.values()), sum(lost.values())) == (0, 0), (
        f"{reads} reads, ranged GETs {proxy.ranged}, faults {proxy.faults}: wrong {wrong}, lost {lost}")


def test_a_proxy_always_answering_another_range_is_an_error_naming_the_request(s3_ranges, monkeypatch):
    import s3fs

    from audiotree.io import AudioFile

    proxy = RangeFaultProxy(s3_ranges, pattern=("other-206",))
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        s3fs.S3FileSystem.clear_instance_cache()
        with pytest.raises(AudioReadError) as info:
            with AudioFile("s3://ranges/wav/utt0003.wav") as f:
                f.read(0, f.info.frames)
    finally:
        proxy.stop()
        s3fs.S3FileSystem.clear_instance_cache()
    message = str(info.value)
    assert "s3://ranges/wav/utt0003.wav" in message and "bytes=0-" in message, message
    assert "other bytes than the range asked for" in message and "Re-encode" not in message, message


@pytest.mark.parametrize("name", ["wav/utt0007.wav", "unpacked/utt0007.flac", "shards/train-000003.tar"])
def test_wrong_ranges_after_the_open_name_the_request_not_the_file(s3_ranges, monkeypatch, name):
    # The open is answered honestly, every later ranged GET with another range: the decoder's seek or read
    # fails, and the error is the storage's (the request named), never "the file may be corrupt ... Re-encode it".
    import s3fs

    from audiotree.io import AudioFile
    from audiotree.io.tar_shards import list_shard

    url = f"s3://ranges/{name}"
    if name.endswith(".tar"):
        member = next(m for m in list_shard(url).members if m.name.endswith(".flac"))
        url = f"tar://{member.name}?offset={member.offset}&size={member.size}::{url}"
    proxy = RangeFaultProxy(s3_ranges, pattern=(None,) + ("other-206",) * 10_000)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        s3fs.S3FileSystem.clear_instance_cache()
        with pytest.raises(AudioReadError) as info:
            with AudioFile(url) as f:
                f.read(f.info.frames // 2, f.info.frames // 4)
    finally:
        proxy.stop()
        s3fs.S3FileSystem.clear_instance_cache()
    message = str(info.value)
    assert "was answered with 206 and Content-Range" in message and "bytes=" in message, message
    assert "Re-encode" not in message and "corrupt" not in message, message


def _flac_and_wav(seconds: float = 12.0) -> dict[str, bytes]:
    rng = np.random.default_rng(5)
    x = (0.2 * rng.standard_normal((int(seconds * RATE), 2))).astype(np.float32)
    out = {}
    for fmt in ("WAV", "FLAC"):
        buf = io.BytesIO()
        soundfile.write(buf, x, RATE, format=fmt, subtype="PCM_16")
        out[f"ranged.{fmt.lower()}"] = buf.getvalue()
    return out


def _excerpts(urls, storage_options=None) -> list:
    from audiotree.io import AudioFile

    out = []
    for url in urls:
        with AudioFile(url, storage_options=storage_options) as f:
            for start in (0, f.info.frames // 3, f.info.frames - 9000, RATE // 2, 2 * f.info.frames // 3):
                out.append(f.read(start, 8000).tobytes())
    return out


@pytest.mark.slow
def test_http_answers_are_checked_too(http_server):
    http_server.objects.update({f"/{k}": v for k, v in _flac_and_wav().items()})
    names = sorted(_flac_and_wav())
    clean = _excerpts([f"{http_server.base}/{n}" for n in names])
    proxy = RangeFaultProxy(int(http_server.base.rsplit(":", 1)[1]))
    try:
        faulty = _excerpts([f"http://127.0.0.1:{proxy.port}/{n}" for n in names])
    finally:
        proxy.stop()
    assert proxy.faults["full-200"] > 0 and proxy.faults["other-206"] > 0, proxy.faults
    assert faulty == clean


@pytest.mark.slow
def test_gcs_answers_are_checked_too():
    server, port = start_gcs_emulator("ranged")
    try:
        with pytest.MonkeyPatch.context() as mp:
            gcs_environment(mp, f"http://127.0.0.1:{port}")
            import gcsfs

            fs = gcsfs.GCSFileSystem(**GCS_OPTIONS)
            for name, data in _flac_and_wav().items():
                fs.pipe(f"ranged/{name}", data)
            urls = [f"gs://ranged/{n}" for n in sorted(_flac_and_wav())]
            clean = _excerpts(urls, GCS_OPTIONS)
            proxy = RangeFaultProxy(port)
            try:
                gcs_environment(mp, f"http://127.0.0.1:{proxy.port}")
                faulty = _excerpts(urls, GCS_OPTIONS)
            finally:
                proxy.stop()
                gcsfs.GCSFileSystem.clear_instance_cache()
    finally:
        server.stop()
    assert proxy.faults["full-200"] > 0 and proxy.faults["other-206"] > 0, proxy.faults
    assert faulty == clean
