"""S3 (moto on 127.0.0.1) behind a proxy that resets connections and cuts bodies short: reads are retried and give
the fault-free stream item for item; an index build stores no transient failure as a permanent row."""

from __future__ import annotations

import io
import socket
import struct
import threading
from http.server import BaseHTTPRequestHandler

import numpy as np
import pytest
import soundfile

from servers import LoopbackServer, forward, moto_s3, request_body, request_headers, send_head

RATE = 16_000
# One fault in every 10 requests at these positions: 30%, never two in a row, so bounded retries get through.
_PATTERN = ("reset", None, None, "truncate", None, "reset-body", None, None, None, None)


def _wav(seconds: float, seed: int, fmt: str = "WAV") -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    soundfile.write(buf, (0.2 * rng.standard_normal(int(seconds * RATE))).astype(np.float32), RATE, format=fmt,
                    subtype="PCM_16")
    return buf.getvalue()


class _BodyFaultProxy(LoopbackServer):
    """An HTTP proxy 127.0.0.1 -> moto that fails requests by ``pattern`` (cycled), or by ``fail(path)``.

    ``"reset"`` closes the connection before answering; ``"truncate"`` sends the
    headers (the full Content-Length) and half the body, then closes;
    ``"reset-body"`` does the same with a TCP reset (RST). A HEAD, which has no
    body, gets a reset instead. ``fail(path)`` true answers every request for the
    path with a 503. Each request is forwarded on a fresh connection.
    """

    def __init__(self, target_port: int, pattern=_PATTERN, fail=None) -> None:
        self.pattern, self.fail, self.requests, self.lock = pattern, fail, 0, threading.Lock()
        self.faults = {"reset": 0, "truncate": 0, "reset-body": 0, "503": 0, "empty-200": 0}
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _count(self, kind: str) -> None:
                with proxy.lock:
                    proxy.faults[kind] += 1

            def _forward(self) -> None:
                body = request_body(self)
                with proxy.lock:
                    n = proxy.requests
                    proxy.requests += 1
                if proxy.fail is not None and proxy.fail(self.path):
                    self._count("503")
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                kind = proxy.pattern[n % len(proxy.pattern)]
                if kind == "empty-200" and self.command == "GET":  # a middlebox answering 200 with no body
                    self._count(kind)
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if kind is not None and kind != "empty-200" and (kind == "reset" or self.command == "HEAD"):
                    self._count("reset")
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                resp, data = forward(self, target_port, request_headers(self), body)
                if kind == "empty-200" or (kind is not None and len(data) < 2):
                    kind = None  # nothing to cut short
                send_head(self, resp, data)
                if self.command == "HEAD":
                    return
                if kind is None:
                    self.wfile.write(data)
                    return
                self._count(kind)
                self.wfile.write(data[: len(data) // 2])
                self.wfile.flush()
                if kind == "reset-body":  # SO_LINGER 0: close() sends RST
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self.serve(Handler)


@pytest.fixture(scope="module")
def s3_corpus():
    """moto on 127.0.0.1 holding 6 files (WAV and FLAC, ~100-200 KB) under s3://faults/; stopped after the module."""
    with moto_s3() as server:
        server.fs.mkdir("faults")
        for i in range(6):
            ext, fmt = ("wav", "WAV") if i % 2 else ("flac", "FLAC")
            server.fs.pipe(f"faults/audio/f{i}.{ext}", _wav(3.0 + i, seed=i, fmt=fmt))
        yield server.port


@pytest.fixture(autouse=True)
def _fresh_filesystems():
    """Each test starts and ends with no cached S3 filesystem (their endpoints differ)."""
    s3fs = pytest.importorskip("s3fs")

    s3fs.S3FileSystem.clear_instance_cache()
    yield
    s3fs.S3FileSystem.clear_instance_cache()


def _through(monkeypatch, proxy) -> None:
    import s3fs

    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
    s3fs.S3FileSystem.clear_instance_cache()


def _stream():
    import grain

    from audiotree.sources import create_audio_dataset

    ds = create_audio_dataset("s3://faults/audio", sample_rate=RATE, duration=0.5, num_epochs=None)
    it = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0)))
    return [(item.filepath[0], float(item.offset[0]), np.asarray(item.waveform).tobytes()) for item in
            (next(it) for _ in range(16))]


@pytest.mark.slow
def test_resets_and_truncated_bodies_at_30_percent_give_the_fault_free_stream(s3_corpus, monkeypatch):
    clean = _stream()
    proxy = _BodyFaultProxy(s3_corpus)
    try:
        _through(monkeypatch, proxy)
        faulty = _stream()
    finally:
        proxy.stop()
    assert proxy.faults["truncate"] > 0 and proxy.faults["reset-body"] > 0 and proxy.faults["reset"] > 0, proxy.faults
    assert len(faulty) == len(clean)
    for a, b in zip(faulty, clean):
        assert a == b


@pytest.mark.slow
def test_an_index_build_through_faults_matches_one_without(s3_corpus, monkeypatch, tmp_path):
    from audiotree.index import build_index, open_index

    build_index("s3://faults/audio", tmp_path / "clean.parquet", executor="serial", show_progress=False)
    proxy = _BodyFaultProxy(s3_corpus)
    try:
        _through(monkeypatch, proxy)
        report = build_index("s3://faults/audio", tmp_path / "faulty.parquet", executor="serial", show_progress=False)
    finally:
        proxy.stop()
    assert report.unreadable == 0 and sum(proxy.faults.values()) > 0, proxy.faults
    clean, faulty = open_index(tmp_path / "clean.parquet", columns="all"), open_index(tmp_path / "faulty.parquet",
                                                                                       columns="all")
    assert clean.table.drop_columns(["mtime_ns"]).equals(faulty.table.drop_columns(["mtime_ns"]))


@pytest.mark.slow
def test_a_transient_failure_in_a_build_is_retried_by_the_next_build(s3_corpus, monkeypatch, tmp_path):
    from audiotree.index import build_index, open_index

    out = tmp_path / "i.parquet"
    proxy = _BodyFaultProxy(s3_corpus, pattern=(None,), fail=lambda path: "f3.wav" in path and "list-type" not in path)
    try:
        _through(monkeypatch, proxy)
        # Our retries only: botocore's own (with their backoff) would multiply the wait.
        quick = {"config_kwargs": {"retries": {"max_attempts": 1, "mode": "standard"}}}
        report = build_index("s3://faults/audio", out, executor="serial", show_progress=False,
                             storage_options=quick)
    finally:
        proxy.stop()
    assert report.unreadable == 1 and proxy.faults["503"] > 0
    ix = open_index(out, columns="all")
    row = ix.table.column("path").to_pylist().index("s3://faults/audio/f3.wav")
    assert ix.table.column("error_kind")[row].as_py() == "transient"
    assert "503" in ix.table.column("error")[row].as_py()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{s3_corpus}")
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    again = build_index("s3://faults/audio", out, executor="serial", show_progress=False)
    assert (again.read, again.reused, again.unreadable) == (1, 5, 0)
    assert open_index(out).column("readable").all()


def test_an_empty_answer_to_the_first_read_is_not_taken_for_an_empty_object(s3_corpus, monkeypatch):
    from audiotree.io import AudioFile

    url = "s3://faults/audio/f1.wav"
    with AudioFile(url) as f:
        clean = f.read(0, f.info.frames)
    proxy = _BodyFaultProxy(s3_corpus, pattern=("empty-200",) + (None,) * 50)
    try:
        _through(monkeypatch, proxy)
        with AudioFile(url) as f:  # before: "The file is empty (0 bytes)" for a 128 KB object
            again = f.read(0, f.info.frames)
    finally:
        proxy.stop()
    assert proxy.faults["empty-200"] == 1
    np.testing.assert_array_equal(again, clean)


def test_hints_name_what_happened():
    from audiotree.io.storage import remote_error

    botocore = pytest.importorskip("botocore.exceptions")
    http_exceptions = pytest.importorskip("aiohttp.http_exceptions")
    client = pytest.importorskip("aiohttp.client_exceptions")
    checksum = botocore.FlexibleChecksumError(error_msg="Expected checksum abc did not match calculated checksum def")
    message = str(remote_error("s3://b/a.wav", checksum, "read", attempts=5))
    assert "failed the storage's checksum" in message and "refused" not in message and "s3://b/a.wav" in message
    try:
        try:
            raise http_exceptions.ContentLengthError("Not enough data to satisfy content length header")
        except http_exceptions.ContentLengthError as inner:
            raise client.ClientPayloadError("Response payload is not completed") from inner
    except client.ClientPayloadError as exc:
        cut = exc
    message = str(remote_error("s3://b/a.wav", cut, "read", attempts=5))
    assert "ending before the whole answer arrived" in message and "HTTP 400" not in message
