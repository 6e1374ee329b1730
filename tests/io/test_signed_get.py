"""S3 ranged GETs by presigned URL (issue 39): moto on 127.0.0.1 behind a proxy that sees how each GET is authorized.

The proxy counts the ranged GETs that carry a signature in their query (a presigned URL), an ``Authorization``
header (s3fs's ``_call_s3``) or neither (an anonymous URL), and does what moto does not: it refuses a presigned
URL past its expiry with S3's 403, as AWS does. It can also refuse every signed GET (a bucket where presigning
does not work) or reset it (a transient fault).
"""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import grain
import numpy as np
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.index import build_index
from audiotree.io import read_ahead, signed_get
from audiotree.io.byte_counters import byte_counters, reset_byte_counters
from audiotree.io.ranged_get import get_range, read_range
from audiotree.sources import Corpus, ReadAhead, create_audio_dataset
from servers import LoopbackServer, forward, moto_s3, request_body, request_headers, send_head

RATE = 16_000
SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
_EXPIRED = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code>'
            b"<Message>Request has expired</Message></Error>")


def _expired(query: dict) -> bool:
    """Whether a presigned URL's query says it has expired (SigV2 ``Expires``, SigV4 ``X-Amz-Date`` + ``X-Amz-Expires``)."""
    if "Expires" in query:
        return int(query["Expires"][0]) < time.time()
    if "X-Amz-Date" in query:
        signed = time.mktime(time.strptime(query["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ")) - time.timezone
        return signed + int(query.get("X-Amz-Expires", ["0"])[0]) < time.time()
    return False


class AuthProxy(LoopbackServer):
    """127.0.0.1 -> moto; counts ranged GETs by how they are authorized: ``signed``, ``header``, ``none``."""

    def __init__(self, target_port: int) -> None:
        self.lock = threading.Lock()
        self.refuse_signed = self.reset_signed = False
        self.reset_counts()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _forward(self) -> None:
                body = request_body(self)
                query = parse_qs(urlsplit(self.path).query)
                signed = "Signature" in query or "X-Amz-Signature" in query
                if self.command == "GET" and "Range" in self.headers:
                    kind = "signed" if signed else "header" if "Authorization" in self.headers else "none"
                    with proxy.lock:
                        proxy.counts[kind] += 1
                if signed and proxy.reset_signed:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if signed and (proxy.refuse_signed or _expired(query)):
                    with proxy.lock:
                        proxy.counts["refused"] += 1
                    status = 403 if proxy.refuse_signed in (False, True) else proxy.refuse_signed
                    self._answer(status, _EXPIRED if status == 403 else b"<Error><Code>PermanentRedirect</Code></Error>")
                    return
                resp, data = forward(self, target_port, request_headers(self), body)
                send_head(self, resp, data)
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self.serve(Handler)

    def reset_counts(self) -> None:
        self.counts = {"signed": 0, "header": 0, "none": 0, "refused": 0}


def _tone(seconds: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    return (0.3 * np.sin(2 * np.pi * (220 + 40 * seed) * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """moto behind an :class:`AuthProxy`; WAV and FLAC (the flac tool) files in s3://signed/c/ and on disk, an index
    of each; the proxy and the folder."""
    folder = tmp_path_factory.mktemp("signed")
    with moto_s3(proxy=AuthProxy) as server:
        server.fs.mkdir("signed")
        names = []
        for i in range(4):
            wav = folder / f"w{i}.wav"
            soundfile.write(wav, _tone(6 + 2 * i, i), RATE, subtype="PCM_16")
            names.append(wav.name)
            if i % 2:
                subprocess.run(["flac", "-s", "-f", "-o", str(folder / f"f{i}.flac"), str(wav)], check=True)
                names.append(f"f{i}.flac")
        for name in names:
            server.fs.pipe(f"signed/c/{name}", (folder / name).read_bytes())
        build_index([f"s3://signed/c/{n}" for n in names], str(folder / "s3.parquet"), executor="serial",
                    show_progress=False)
        build_index([str(folder / n) for n in names], str(folder / "local.parquet"), executor="serial",
                    show_progress=False)
        yield server, folder


@pytest.fixture(autouse=True)
def _fresh(s3):
    signed_get.forget()
    s3[0].proxy.refuse_signed = s3[0].proxy.reset_signed = False
    s3[0].proxy.reset_counts()
    yield
    signed_get.forget()


def _items(index: str, ahead, n: int = 24):
    ds = create_audio_dataset(corpus=Corpus(index=index, on_stale="trust", read_ahead=ahead), duration=1.0,
                              sample_rate=RATE, num_epochs=None)
    it = iter(ds.to_iter_dataset(SYNC))
    return [(t.filepath[0].rsplit("/", 1)[1], float(t.offset[0]), np.asarray(t.waveform)) for t in
            (next(it) for _ in range(n))]


def _same(a, b) -> None:
    assert [x[:2] for x in a] == [x[:2] for x in b]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x[2], y[2])


def test_items_from_s3_equal_local_items_with_and_without_read_ahead_and_go_by_signed_urls(s3):
    server, folder = s3
    local = _items(str(folder / "local.parquet"), None)
    before = signed_get.signed_gets()["signed"]
    plain = _items(str(folder / "s3.parquet"), None)
    _same(plain, local)
    # Read on demand, every GET the server saw is one the client counted as answered by its signed URL.
    on_demand = dict(server.proxy.counts)
    assert on_demand["signed"] > 0 and signed_get.signed_gets()["signed"] - before == on_demand["signed"], on_demand
    read_ahead.close_stores()
    ahead = _items(str(folder / "s3.parquet"), ReadAhead(items=8))
    read_ahead.close_stores()
    _same(ahead, local)
    counts = server.proxy.counts
    assert counts["signed"] > on_demand["signed"] and counts["header"] == 0 and counts["refused"] == 0, counts
    # Fetches still in flight when the store closed reached the server but were cancelled before their answer,
    # which is when the client counts them: the client's count lies between the two.
    assert on_demand["signed"] < signed_get.signed_gets()["signed"] - before <= counts["signed"]


def test_a_range_equals_the_file_bytes_for_every_answer_kind(s3):
    server, folder = s3
    data = (folder / "w1.wav").read_bytes()
    fs, url = server.fs, "s3://signed/c/w1.wav"
    reset_byte_counters()
    assert get_range(fs, url, 100, 5000).data == data[100:5000]
    assert get_range(fs, url, len(data) - 10, len(data) + 50).data == data[-10:]  # clipped at the end
    assert get_range(fs, url, len(data) + 10, len(data) + 20).data == b""  # 416: past the end
    counted = byte_counters()  # counted as before: three S3 requests; the URL cache is not a read cache
    assert counted["by_backend"]["s3"] == {"requests": 3, "bytes_fetched": 4900 + 10}, counted
    assert counted["cache_hits"] == counted["cache_misses"] == 0, counted
    with pytest.raises(AudioReadError, match="s3://signed/c/missing.wav") as caught:
        read_range(fs, "s3://signed/c/missing.wav", 0, 10)
    assert "404" in str(caught.value)
    assert server.proxy.counts["header"] == 0, server.proxy.counts


def test_an_expired_url_is_dropped_the_read_falls_back_and_the_next_is_signed_again(s3):
    server, folder = s3
    data = (folder / "w2.wav").read_bytes()
    fs, url = server.fs, "s3://signed/c/w2.wav"
    assert get_range(fs, url, 0, 1000).data == data[:1000]
    (entry,) = [signed_get._urls.get(key) for key in signed_get._urls.keys() if key[1] == url]
    entry[0] = fs.url(url, expires=-60)  # the cached URL, now past its expiry (as after a long pause)
    assert get_range(fs, url, 1000, 3000).data == data[1000:3000]
    assert server.proxy.counts == {"signed": 2, "header": 1, "none": 0, "refused": 1}
    assert get_range(fs, url, 3000, 4000).data == data[3000:4000]
    assert server.proxy.counts["signed"] == 3 and server.proxy.counts["refused"] == 1  # signed afresh


def test_a_url_that_never_worked_gives_way_to_the_usual_get_for_that_object(s3, monkeypatch):
    server, folder = s3
    data = (folder / "w3.wav").read_bytes()
    fs, url = server.fs, "s3://signed/c/w3.wav"
    monkeypatch.setattr(signed_get, "SIGNED_FOR", -60)  # every URL signed now is expired: S3 answers 403
    for start in (0, 2000, 4000):
        assert get_range(fs, url, start, start + 1000).data == data[start:start + 1000]
    # One refused signed GET, then the usual way without trying again.
    assert server.proxy.counts == {"signed": 1, "header": 3, "none": 0, "refused": 1}
    assert signed_get.signed_gets()["usual"] >= 2


def test_sse_c_objects_are_read_the_usual_way(s3):
    import s3fs

    server, folder = s3
    key = "k" * 32
    fs = s3fs.S3FileSystem(s3_additional_kwargs={"SSECustomerAlgorithm": "AES256", "SSECustomerKey": key})
    data = (folder / "w0.wav").read_bytes()
    fs.pipe("signed/ssec/w0.wav", data)
    assert get_range(fs, "s3://signed/ssec/w0.wav", 10, 2000).data == data[10:2000]
    assert server.proxy.counts["signed"] == 0 and server.proxy.counts["header"] == 1, server.proxy.counts


def test_an_anonymous_filesystem_reads_a_public_object_by_its_plain_url(s3):
    import s3fs

    server, folder = s3
    data = (folder / "w0.wav").read_bytes()
    server.fs.pipe("signed/public/w0.wav", data)
    server.fs.chmod("signed/public/w0.wav", acl="public-read")
    anon = s3fs.S3FileSystem(anon=True)
    assert get_range(anon, "s3://signed/public/w0.wav", 44, 3000).data == data[44:3000]
    assert server.proxy.counts["none"] == 1 and server.proxy.counts["header"] == 0, server.proxy.counts
    with pytest.raises(AudioReadError, match="403") as caught:  # a private object: refused, as before
        read_range(anon, "s3://signed/c/w0.wav", 0, 100)
    assert "s3://signed/c/w0.wav" in str(caught.value)


def test_a_failing_signed_get_is_retried_and_names_the_s3_url_never_the_signature(s3):
    server, folder = s3
    fs, url = server.fs, "s3://signed/c/w1.wav"
    get_range(fs, url, 0, 10)  # signed and cached
    (entry,) = [signed_get._urls.get(key) for key in signed_get._urls.keys() if key[1] == url]
    query = parse_qs(urlsplit(entry[0]).query)
    signature = (query.get("Signature") or query["X-Amz-Signature"])[0]
    server.proxy.reset_counts()
    server.proxy.reset_signed = True  # every signed GET: the connection is reset (transient)
    with pytest.raises(AudioReadError) as caught:
        read_range(fs, url, 0, 1000)
    text = "".join(traceback.format_exception(caught.value))
    assert url in str(caught.value) and "5 attempt" in str(caught.value), str(caught.value)
    for secret in (signature, "X-Amz-Signature", "X-Amz-Credential", "Signature=", entry[0]):
        assert secret not in text
    # Retried as a transient fault, five times (aiohttp itself tries a reset kept-alive connection twice).
    assert 5 <= server.proxy.counts["signed"] <= 10 and server.proxy.counts["header"] == 0, server.proxy.counts


def test_an_aiohttp_error_naming_the_signed_url_names_the_s3_url_instead():
    import aiohttp

    import yarl

    signed = "http://127.0.0.1:9/b/k.wav?AWSAccessKeyId=testing&Signature=abc%2Fdef%2Bg%3D&Expires=1"
    for spelled in (signed, str(yarl.URL(signed))):  # aiohttp names its request by a yarl URL: re-encoded
        exc = aiohttp.ConnectionTimeoutError(f"Connection timeout to host {spelled}")
        assert signed_get._scrubbed(exc, signed, "s3://b/k.wav")
        assert str(exc) == "Connection timeout to host s3://b/k.wav"
    kept = aiohttp.ClientConnectionError("no URL in this one")
    assert signed_get._scrubbed(kept, signed, "s3://b/k.wav") and str(kept) == "no URL in this one"


_EXIT_SCRIPT = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("always")
    from audiotree.io import storage
    from audiotree.io.ranged_get import get_range
    fs = storage.filesystem("s3://signed/c/w0.wav")
    print(len(get_range(fs, "s3://signed/c/w0.wav", 0, 4096).data))
    from audiotree.io import loop_shutdown, signed_get
    sessions = list(signed_get._sessions.values())
    if sys.argv[1:] == ["stop"]:  # what the exit handler does, checked
        print(len(sessions), loop_shutdown.stop_io_loop(), all(s.closed for s in sessions))
""")


def test_a_process_that_read_by_signed_url_exits_cleanly(s3):
    server, _ = s3
    import os

    env = dict(os.environ, **server.env, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-X", "dev", "-c", _EXIT_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "4096", done.stderr
    assert "Unclosed" not in done.stderr and "Signature" not in done.stderr, done.stderr
    stopped = subprocess.run([sys.executable, "-X", "dev", "-c", _EXIT_SCRIPT, "stop"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert stopped.stdout.split() == ["4096", "1", "True", "True"], (stopped.stdout, stopped.stderr)
    assert server.proxy.counts["signed"] == 2


def test_a_forked_child_reads_by_a_session_of_its_own(s3):
    import multiprocessing

    server, folder = s3
    data = (folder / "w1.wav").read_bytes()
    fs, url = server.fs, "s3://signed/c/w1.wav"
    assert get_range(fs, url, 0, 100).data == data[:100]  # the parent's session exists
    with multiprocessing.get_context("fork").Pool(1) as pool:
        got = pool.apply(_child_read, (url, 500, 900))
    assert got == data[500:900]
    assert get_range(fs, url, 100, 200).data == data[100:200]  # the parent's session still works
    assert server.proxy.counts["signed"] == 3 and server.proxy.counts["header"] == 0, server.proxy.counts


def _child_read(url: str, start: int, stop: int) -> bytes:
    from audiotree.io import storage

    return get_range(storage.filesystem(url), url, start, stop).data


def test_filesystems_with_equal_options_never_share_signed_urls(s3, monkeypatch):
    import s3fs

    server, folder = s3
    data = (folder / "w0.wav").read_bytes()
    url = "s3://signed/c/w0.wav"
    assert get_range(server.fs, url, 0, 100).data == data[:100]  # signed for the proxy's endpoint
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.port}")  # moto itself, same options
    s3fs.S3FileSystem.clear_instance_cache()
    direct = s3fs.S3FileSystem()
    try:
        assert get_range(direct, url, 100, 200).data == data[100:200]
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert server.proxy.counts["signed"] == 1, server.proxy.counts  # the second GET went to moto, not the proxy


def test_a_redirect_sends_the_whole_bucket_the_usual_way(s3):
    server, folder = s3
    server.proxy.refuse_signed = 301  # as S3 answers a URL signed for another region
    for name in ("w0.wav", "w1.wav", "w2.wav"):
        data = (folder / name).read_bytes()
        assert get_range(server.fs, f"s3://signed/c/{name}", 0, 500).data == data[:500]
    assert server.proxy.counts == {"signed": 1, "header": 3, "none": 0, "refused": 1}


def test_a_version_and_requester_pays_travel_in_the_signed_url(s3):
    import s3fs

    server, _ = s3
    server.fs.mkdir("versioned")
    server.fs.call_s3("put_bucket_versioning", Bucket="versioned", VersioningConfiguration={"Status": "Enabled"})
    server.fs.pipe("versioned/a.bin", b"first version " * 100)
    fs = s3fs.S3FileSystem(version_aware=True, requester_pays=True)
    old = fs.info("versioned/a.bin")["VersionId"]
    server.fs.pipe("versioned/a.bin", b"SECOND VERSION " * 100)
    server.proxy.reset_counts()
    assert get_range(fs, f"s3://versioned/a.bin?versionId={old}", 6, 20).data == (b"first version " * 100)[6:20]
    assert get_range(fs, "s3://versioned/a.bin", 0, 6).data == b"SECOND"
    assert server.proxy.counts["signed"] == 2 and server.proxy.counts["header"] == 0, server.proxy.counts
    queries = [parse_qs(urlsplit(signed_get._urls.get(key)[0]).query) for key in signed_get._urls.keys()]
    assert sorted(q.get("versionId", [""])[0] for q in queries) == ["", old]
    assert all(q["x-amz-request-payer"] == ["requester"] for q in queries), queries


def test_without_credentials_the_read_fails_as_before(s3, monkeypatch, tmp_path):
    import s3fs

    server, _ = s3
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        with pytest.raises(AudioReadError) as caught:
            read_range(s3fs.S3FileSystem(), "s3://signed/c/w0.wav", 0, 100)
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
    assert "s3://signed/c/w0.wav" in str(caught.value), str(caught.value)
    assert server.proxy.counts["signed"] == 0, server.proxy.counts
