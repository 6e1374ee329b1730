"""Object storage through fsspec, against real servers the tests start on 127.0.0.1.

* S3: moto's server mode (``ThreadedMotoServer``) read with s3fs;
* GCS: ``gcp-storage-emulator`` read with gcsfs;
* HTTP: a small ``http.server`` below that honours ``Range`` (or, on request,
  ignores it), counts the bytes it sends, and injects faults.

Every server is stopped by the fixture that started it.
"""

from __future__ import annotations

import io
import itertools
import os
import socket
import threading
import warnings
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import grain
import numpy as np
import pytest
import soundfile

from audiotree.errors import AudioReadError
from audiotree.io import AudioFile, probe, remote_file, storage
from audiotree.sources import Corpus, Output, create_audio_dataset, create_balanced_audio_dataset, find_audio_files
from counted_http import answer_range
from servers import LoopbackServer, forward, free_port, moto_s3, request_body, request_headers, send_head

SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
SECRET = "s3cr3t-value-never-shown"


def _encode(x: np.ndarray, rate: int, fmt: str, subtype: str | None = None) -> bytes:
    buf = io.BytesIO()
    soundfile.write(buf, x, rate, format=fmt, subtype=subtype)
    return buf.getvalue()


def _noise(seconds: float, rate: int, channels: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((int(seconds * rate), channels)) * 0.1).astype(np.float32)


def _local_read(data: bytes, start: int, frames: int) -> np.ndarray:
    with soundfile.SoundFile(io.BytesIO(data)) as f:
        f.seek(start)
        return f.read(frames, dtype="float32", always_2d=True)


# ---------------------------------------------------------------------------
# An HTTP server honouring Range, with byte counting and fault injection
# ---------------------------------------------------------------------------


class _State:
    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}
        self.honour_range = True
        self.fail_every = 0  # every n-th request fails (0: never)
        self.fail_mode = "503"  # or "reset"
        self.forbidden: set[str] = set()
        self.requests = 0
        self.bytes_sent = 0
        self.lock = threading.Lock()

    def count_sent(self, nbytes: int) -> None:
        with self.lock:
            self.bytes_sent += nbytes

    def reset_counters(self) -> None:
        with self.lock:
            self.requests = 0
            self.bytes_sent = 0


def _handler(state: _State):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def _fault(self) -> bool:
            with state.lock:
                state.requests += 1
                n = state.requests
            if state.fail_every and n % state.fail_every == 0:
                if state.fail_mode == "reset":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return True
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True
            return False

        def _serve(self, body: bool) -> None:
            if self._fault():
                return
            path = self.path.split("?", 1)[0]
            if path in state.forbidden:
                self.send_response(403)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = state.objects.get(path)
            if data is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            answer_range(self, data, body=body, ranges=state.honour_range, sent=state.count_sent)

        def do_GET(self) -> None:
            self._serve(True)

        def do_HEAD(self) -> None:
            self._serve(False)

    return Handler


@pytest.fixture(scope="module")
def http_server():
    state = _State()
    server = LoopbackServer()
    server.serve(_handler(state))
    state.base = f"http://127.0.0.1:{server.port}"
    try:
        yield state
    finally:
        server.stop()


@pytest.fixture
def http(http_server):
    """The module's HTTP server with default behaviour restored after each test."""
    yield http_server
    http_server.honour_range = True
    http_server.fail_every = 0
    http_server.forbidden.clear()
    http_server.reset_counters()


# ---------------------------------------------------------------------------
# S3 (moto server) and GCS (emulator)
# ---------------------------------------------------------------------------


def upload_corpus(fs, bucket: str, local) -> None:
    """Creates ``bucket`` holding speech (3 files) and music (2), WAV and FLAC, with a copy under ``local``."""
    fs.mkdir(bucket)
    for group, seeds in (("speech", (1, 2, 3)), ("music", (4, 5))):
        (local / group).mkdir()
        for seed in seeds:
            ext, fmt = ("wav", "WAV") if seed % 2 else ("flac", "FLAC")
            data = _encode(_noise(1.5 + 0.25 * seed, 16000, 1, seed), 16000, fmt, "PCM_16")
            (local / group / f"f{seed}.{ext}").write_bytes(data)
            fs.pipe(f"{bucket}/{group}/f{seed}.{ext}", data)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """A moto S3 server on 127.0.0.1; credentials and endpoint through the standard AWS variables."""
    with moto_s3(secret=SECRET) as server:
        fs = server.fs
        local = tmp_path_factory.mktemp("s3corpus")
        upload_corpus(fs, "bucket", local)
        fs.pipe("bucket/speech/.hidden.wav", b"not audio")
        fs.pipe("bucket/docs/readme.txt", b"no audio here")
        yield {"fs": fs, "local": local, "endpoint": server.endpoint}


#: gcsfs options for the emulator: no credentials, any project.
GCS_OPTIONS = {"token": "anon", "project": "test"}


def start_gcs_emulator(bucket: str):
    """A started gcp-storage-emulator on 127.0.0.1 (in memory, holding ``bucket``) and its port; the caller
    stops it. Skips without the emulator or gcsfs."""
    import importlib.util

    emulator = pytest.importorskip("gcp_storage_emulator.server")
    if importlib.util.find_spec("gcsfs") is None:  # looked up, not imported: gcs_environment sets its import-time variable
        pytest.skip("gcsfs is not installed")
    port = free_port()
    server = emulator.create_server("127.0.0.1", port, in_memory=True, default_bucket=bucket)
    server.start()
    return server, port


def gcs_environment(mp: pytest.MonkeyPatch, endpoint: str) -> None:
    """Points gcsfs at ``endpoint`` (the emulator, or a proxy in front of it) through STORAGE_EMULATOR_HOST."""
    mp.setenv("STORAGE_EMULATOR_HOST", endpoint)
    # gcsfs >= 2026 probes the bucket layout over gRPC/TLS on first use (read when
    # gcsfs is imported); the emulator speaks JSON over plain HTTP only.
    mp.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import gcsfs
    import gcsfs.core

    if gcsfs.GCSFileSystem is not gcsfs.core.GCSFileSystem:  # else every request waits out 60 s gRPC probes
        pytest.fail("gcsfs was imported before GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false was set; import it only "
                    "after gcs_environment().")
    gcsfs.GCSFileSystem.clear_instance_cache()


@pytest.fixture(scope="module")
def gcs():
    """gcp-storage-emulator on 127.0.0.1, reached by gcsfs through STORAGE_EMULATOR_HOST."""
    server, port = start_gcs_emulator("audio")
    with pytest.MonkeyPatch.context() as mp:
        try:
            gcs_environment(mp, f"http://127.0.0.1:{port}")
            yield {"options": dict(GCS_OPTIONS)}
        finally:
            import gcsfs

            gcsfs.GCSFileSystem.clear_instance_cache()
            server.stop()


# ---------------------------------------------------------------------------
# Paths and the local fast path
# ---------------------------------------------------------------------------


def test_local_use_never_imports_fsspec(tmp_path, python_exe):
    import subprocess

    path = tmp_path / "a.wav"
    soundfile.write(path, _noise(0.2, 8000, 1, 0), 8000)
    code = (
        "import sys; from audiotree.io import AudioFile; from audiotree.sources import find_audio_files\n"
        f"files = find_audio_files({str(tmp_path)!r}); AudioFile(files[0]).read(0, 10)\n"
        f"AudioFile('file://' + {str(path)!r}).read(0, 10)\n"
        "assert 'fsspec' not in sys.modules and 's3fs' not in sys.modules, sorted(sys.modules)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")]))
    subprocess.run([python_exe, "-c", code], check=True, env=env, timeout=120)


def test_redact_removes_credentials():
    text = storage.redact(
        "GET https://alice:pw123@h/a.wav?X-Amz-Signature=abcd&X-Amz-Credential=AK%2F&token=zz&n=1 key=sekrit-999",
        {"secret": "sekrit-999"},
    )
    assert "pw123" not in text and "abcd" not in text and "AK%2F" not in text and "zz&" not in text
    assert "sekrit-999" not in text and "n=1" in text and "https://***@h/a.wav" in text


def test_unknown_protocol_and_missing_package_name_what_to_do():
    with pytest.raises(AudioReadError, match=r"nosuchproto://b/a\.wav.*knows no 'nosuchproto://'"):
        AudioFile("nosuchproto://b/a.wav")
    with pytest.raises(ValueError, match="knows no 'nosuchproto://' protocol"):
        find_audio_files("nosuchproto://b/prefix")
    pytest.importorskip("fsspec")
    if __import__("importlib").util.find_spec("adlfs") is None:
        with pytest.raises(AudioReadError, match=r"az://c/a\.wav.*needs adlfs \(pip install adlfs\)"):
            AudioFile("az://c/a.wav")


def test_memory_protocol_reads_like_local():
    fsspec = pytest.importorskip("fsspec")
    x = _noise(2.0, 8000, 2, 3)
    data = _encode(x, 8000, "FLAC", "PCM_24")
    fs = fsspec.filesystem("memory")
    fs.pipe("/at-test/clip.flac", data)
    try:
        assert find_audio_files("memory://at-test") == ["memory:///at-test/clip.flac"]
        with AudioFile("memory:///at-test/clip.flac") as f:
            np.testing.assert_array_equal(f.read(4000, 5000), _local_read(data, 4000, 5000))
        assert probe("memory:///at-test/clip.flac").frames == len(x)
    finally:
        fs.rm("/at-test", recursive=True)


# ---------------------------------------------------------------------------
# HTTP: ranges, bytes on the wire, faults
# ---------------------------------------------------------------------------

LONG_SECONDS, EXCERPT_SECONDS, RATE = 60, 3, 44100


@pytest.fixture(scope="module")
def long_files(http_server):
    x = _noise(LONG_SECONDS, RATE, 2, 7)
    files = {
        "/long.wav": _encode(x, RATE, "WAV", "PCM_16"),
        "/long.flac": _encode(x, RATE, "FLAC", "PCM_16"),
    }
    http_server.objects.update(files)
    return files


@pytest.mark.parametrize("name", ["/long.wav", "/long.flac"])
def test_http_excerpt_fetches_only_what_it_needs(http, long_files, name):
    data = long_files[name]
    start, frames = 30 * RATE, EXCERPT_SECONDS * RATE
    http.reset_counters()
    with AudioFile(http.base + name) as f:
        got = f.read(start, frames)
    np.testing.assert_array_equal(got, _local_read(data, start, frames))
    # Measured on the server. The excerpt's encoded size: its share of the
    # file (FLAC of noise has a near-constant bitrate); header allowance:
    # the first read-ahead window.
    excerpt_bytes = len(data) * EXCERPT_SECONDS / LONG_SECONDS
    assert 0 < http.bytes_sent <= 2 * excerpt_bytes + remote_file.MIN_WINDOW + 4096, (http.bytes_sent, excerpt_bytes)


def test_http_transient_faults_are_retried_and_stream_is_unchanged(http, long_files):
    url = http.base + "/long.flac"
    offsets = [0, 5 * RATE, 40 * RATE, 57 * RATE, 12 * RATE]

    def excerpts():
        out = []
        for start in offsets:
            with AudioFile(url) as f:
                out.append(f.read(start, RATE))
        return out

    clean = excerpts()
    for mode in ("503", "reset"):
        http.fail_mode, http.fail_every = mode, 3
        faulty = excerpts()
        http.fail_every = 0
        assert len(faulty) == len(clean)
        for a, b in zip(faulty, clean):
            np.testing.assert_array_equal(a, b)


def test_http_persistent_failure_is_bounded_and_named(http, long_files):
    http.fail_mode, http.fail_every = "503", 1  # every request fails
    url = http.base.replace("http://", "http://user:pw-secret@") + "/long.wav"
    with pytest.raises(AudioReadError) as info:
        AudioFile(url)
    message = str(info.value)
    assert "/long.wav" in message and "503" in message and f"{storage.RETRY_ATTEMPTS} attempts" in message
    assert "pw-secret" not in message and "pw-secret" not in (info.value.file_path or "")


def test_http_permanent_errors_name_url_and_status(http, long_files):
    http.forbidden.add("/long.wav")
    with pytest.raises(AudioReadError, match=r"/long\.wav.*HTTP 403"):
        AudioFile(http.base + "/long.wav")
    with pytest.raises(AudioReadError, match=r"/gone\.wav.*HTTP 404"):
        AudioFile(http.base + "/gone.wav")


def test_http_server_ignoring_range_warns_once_and_copes(http, long_files, monkeypatch):
    monkeypatch.setattr(remote_file, "_RANGE_WARNED", set())
    http.honour_range = False
    start, frames = 20 * RATE, RATE
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in ("/long.wav", "/long.flac", "/long.wav"):
            with AudioFile(http.base + name) as f:
                got = f.read(start, frames)
            np.testing.assert_array_equal(got, _local_read(long_files[name], start, frames))
    notes = [w for w in caught if "ignores HTTP Range" in str(w.message)]
    assert len(notes) == 1 and "127.0.0.1" in str(notes[0].message)


# ---------------------------------------------------------------------------
# S3 through moto's server
# ---------------------------------------------------------------------------


def test_s3_discovery_matches_local_and_skips_hidden(s3):
    remote = find_audio_files("s3://bucket/speech")
    local = find_audio_files(str(s3["local"] / "speech"))
    assert [u.rsplit("/", 1)[1] for u in remote] == [Path(p).name for p in local]
    assert all(u.startswith("s3://bucket/speech/") for u in remote)
    assert find_audio_files("s3://bucket/*/f1.*") == ["s3://bucket/speech/f1.wav"]
    assert find_audio_files("s3://bucket/music/f4.flac") == ["s3://bucket/music/f4.flac"]


@pytest.mark.parametrize("fmt,subtype,ext", [("WAV", "FLOAT", "wav"), ("FLAC", "PCM_24", "flac"),
                                              ("OGG", "VORBIS", "ogg"), ("MP3", "MPEG_LAYER_III", "mp3")])
def test_s3_excerpts_equal_local_reads(s3, tmp_path, fmt, subtype, ext):
    x = _noise(4.0, 22050, 2, 11)
    local = tmp_path / f"clip.{ext}"
    soundfile.write(local, x, 22050, format=fmt, subtype=subtype)
    s3["fs"].put_file(str(local), f"bucket/formats/clip.{ext}")
    with AudioFile(local) as a, AudioFile(f"s3://bucket/formats/clip.{ext}") as b:
        assert (a.info.frames, a.info.channels, a.info.format) == (b.info.frames, b.info.channels, b.info.format)
        for start, n in ((0, 3000), (40000, 22050), (70000, 10000), (41000, 500)):
            np.testing.assert_array_equal(a.read(start, n), b.read(start, n))


def test_s3_missing_bucket_and_prefix_without_audio(s3):
    with pytest.raises(FileNotFoundError, match=r"s3://no-such-bucket/speech.*bucket 'no-such-bucket' does not exist"):
        find_audio_files("s3://no-such-bucket/speech")
    with pytest.raises(FileNotFoundError, match=r"s3://bucket/nothing-here"):
        find_audio_files("s3://bucket/nothing-here")
    with pytest.raises(RuntimeError, match=r"No audio files found: Audio source 's3://bucket/docs'"):
        create_audio_dataset("s3://bucket/docs", duration=0.1, sample_rate=16000)


def test_s3_object_deleted_between_listing_and_reading(s3):
    fs = s3["fs"]
    fs.pipe("bucket/doomed/a.wav", _encode(_noise(1.0, 16000, 1, 1), 16000, "WAV", "PCM_16"))
    fs.pipe("bucket/doomed/b.wav", _encode(_noise(1.0, 16000, 1, 2), 16000, "WAV", "PCM_16"))
    ds = create_audio_dataset("s3://bucket/doomed", duration=0.25, sample_rate=16000, shuffle=False)
    fs.rm("bucket/doomed/a.wav")
    with pytest.raises(AudioReadError, match=r"'s3://bucket/doomed/a\.wav'.*HTTP 404"):
        ds[0]
    kept = create_audio_dataset(filepaths=["s3://bucket/doomed/a.wav", "s3://bucket/doomed/b.wav"], duration=0.25,
                                sample_rate=16000, shuffle=False, corpus=Corpus(on_read_error="skip"))
    assert kept[0] is None and kept[1] is not None


def test_s3_open_gets_size_and_header_in_one_request(s3):
    """The first ranged GET carries the size (Content-Range) and holds the header: no HEAD, no second GET."""
    data = (s3["local"] / "speech" / "f1.wav").read_bytes()
    remote = remote_file.open_input("s3://bucket/speech/f1.wav")
    try:
        assert remote.size == len(data)
        assert remote.bytes_fetched == len(data)  # a small file: the whole of it is the first window
        assert remote.read(64) == data[:64]
        remote.seek(len(data) - 10)
        assert remote.read() == data[-10:]
        assert remote.bytes_fetched == len(data)  # both reads were served from that one answer
    finally:
        remote.close()
    long = _encode(_noise(6.0, 16000, 1, 9), 16000, "WAV", "PCM_16")
    s3["fs"].pipe("bucket/long/l.wav", long)
    with remote_file.open_input("s3://bucket/long/l.wav") as remote:
        assert remote.size == len(long) and remote.bytes_fetched == remote_file.MIN_WINDOW
    with AudioFile("s3://bucket/long/l.wav") as f:
        np.testing.assert_array_equal(f.read(40000, 8000), _local_read(long, 40000, 8000))


def test_s3_empty_object_is_named_not_read_as_audio(s3):
    s3["fs"].pipe("bucket/empty/e.wav", b"")
    assert remote_file.open_input("s3://bucket/empty/e.wav").size == 0
    with pytest.raises(AudioReadError, match=r"s3://bucket/empty/e\.wav"):
        AudioFile("s3://bucket/empty/e.wav")


def test_s3_secret_never_in_messages(s3):
    with pytest.raises(AudioReadError) as info:
        AudioFile("s3://bucket/speech/missing.wav")
    assert SECRET not in str(info.value)
    with storage.use_storage_options({"secret": "explicit-secret-123", "key": "testing"}):
        with pytest.raises(AudioReadError) as info:
            AudioFile("s3://bucket/speech/missing.wav")
    assert "explicit-secret-123" not in str(info.value)


def _keys(items) -> list:
    return [(np.asarray(x.waveform).tobytes(), bytes(np.asarray(x._metadata["source"]).tobytes())) for x in items]


@pytest.mark.slow
def test_seed_pipeline_on_s3_with_two_workers_equals_local_disk(s3):
    local = s3["local"]

    def build(speech, music):
        return create_balanced_audio_dataset(
            sources={"speech": [speech], "music": [music]}, weights={"speech": 0.7, "music": 0.3},
            sample_rate=16000, duration=0.5,
        )

    def stream(ds, n, state=None):
        it = iter(ds.to_iter_dataset(SYNC).mp_prefetch(grain.MultiprocessingOptions(num_workers=2)))
        try:
            if state is not None:
                it.set_state(state)
            items = [next(it) for _ in range(n)]
            return items, it.get_state()
        finally:
            it.close()

    on_disk = build(str(local / "speech"), str(local / "music"))
    on_s3 = build("s3://bucket/speech", "s3://bucket/music")
    reference = list(itertools.islice(iter(on_disk.to_iter_dataset(SYNC)), 24))  # local disk, in process
    head, state = stream(on_s3, 10)
    tail, _ = stream(on_s3, 14, state)
    assert _keys(head + tail) == _keys(reference)


# ---------------------------------------------------------------------------
# GCS through the emulator
# ---------------------------------------------------------------------------


def test_gcs_emulator_list_and_read(gcs):
    import gcsfs

    fs = gcsfs.GCSFileSystem(**gcs["options"])
    x = _noise(3.0, 16000, 1, 21)
    data = _encode(x, 16000, "FLAC", "PCM_16")
    fs.pipe("audio/clips/one.flac", data)
    fs.pipe("audio/clips/sub/two.wav", _encode(x[:8000], 16000, "WAV", "PCM_16"))
    with storage.use_storage_options(gcs["options"]):
        assert find_audio_files("gs://audio/clips") == ["gs://audio/clips/one.flac", "gs://audio/clips/sub/two.wav"]
        with AudioFile("gs://audio/clips/one.flac") as f:
            np.testing.assert_array_equal(f.read(12000, 16000), _local_read(data, 12000, 16000))
        with pytest.raises(AudioReadError, match=r"gs://audio/clips/none\.wav.*HTTP 404"):
            AudioFile("gs://audio/clips/none.wav")


# ---------------------------------------------------------------------------
# A corpus index built from and stored on S3
# ---------------------------------------------------------------------------


def _index_rows(ix) -> list:
    cols = ["group", "size", "container", "codec", "sample_rate", "channels", "frames", "duration", "readable"]
    return [tuple(ix.table.column(c)[i].as_py() for c in cols) for i in range(len(ix))]


def test_s3_index_built_from_and_stored_on_s3(s3, tmp_path, monkeypatch):
    import concurrent.futures

    import s3fs

    from audiotree.index import build_index, open_index

    # The endpoint comes only from storage_options (not the environment), so
    # the options must reach discovery, the worker threads and the upload.
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    s3fs.S3FileSystem.clear_instance_cache()
    options = {"endpoint_url": s3["endpoint"]}
    sources = {"speech": ["s3://bucket/speech"], "music": ["s3://bucket/music"]}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        report = build_index(sources, "s3://bucket/corpus.parquet", executor=pool, show_progress=False,
                             storage_options=options)
    assert (report.path, report.rows, report.read, report.unreadable) == ("s3://bucket/corpus.parquet", 5, 5, 0)
    remote = open_index("s3://bucket/corpus.parquet", columns="all", storage_options=options)
    assert remote.paths() == ["s3://bucket/music/f4.flac", "s3://bucket/music/f5.wav", "s3://bucket/speech/f1.wav",
                              "s3://bucket/speech/f2.flac", "s3://bucket/speech/f3.wav"]
    local = build_index({g: [str(s3["local"] / g)] for g in ("speech", "music")}, tmp_path / "local.parquet",
                        executor="serial", show_progress=False)
    local_ix = open_index(local.path, columns="all")
    assert _index_rows(remote) == _index_rows(local_ix)
    for i in range(len(remote)):
        np.testing.assert_array_equal(remote.profile(i), local_ix.profile(i))
    assert all(m > 0 for m in remote.column("mtime_ns"))  # the storage's LastModified
    # An update re-reads nothing (sizes and times unchanged) and is uploaded again.
    again = build_index(sources, "s3://bucket/corpus.parquet", executor="serial", show_progress=False,
                        storage_options=options)
    assert (again.rows, again.read, again.reused) == (5, 0, 5)
    with pytest.raises(FileNotFoundError, match=r"s3://bucket/missing\.parquet"):
        open_index("s3://bucket/missing.parquet", storage_options=options)


def test_s3_dataset_from_s3_index_reads_s3_audio(s3, tmp_path):
    from audiotree.index import build_index

    build_index({"speech": ["s3://bucket/speech"], "music": ["s3://bucket/music"]}, "s3://bucket/ds.parquet",
                executor="serial", show_progress=False)
    build_index({g: [str(s3["local"] / g)] for g in ("speech", "music")}, tmp_path / "ds.parquet",
                executor="serial", show_progress=False)
    kwargs = dict(duration=0.5, sample_rate=16000, shuffle_seed=3, excerpt_seed=4, num_epochs=1, output=Output(measure_lufs=True))
    remote = create_audio_dataset(corpus=Corpus(index="s3://bucket/ds.parquet"), **kwargs)
    local = create_audio_dataset(corpus=Corpus(index=str(tmp_path / "ds.parquet")), **kwargs)
    assert len(remote) == len(local) > 0
    for i in range(len(remote)):
        a, b = remote[i], local[i]
        np.testing.assert_array_equal(np.asarray(a.waveform), np.asarray(b.waveform))
        assert np.asarray(a.lufs).tobytes() == np.asarray(b.lufs).tobytes()


def test_s3_index_cli_builds_on_s3(s3):
    from click.testing import CliRunner

    from audiotree.cli import cli
    from audiotree.index import open_index

    result = CliRunner().invoke(cli, ["index", "speech=s3://bucket/speech", "--out", "s3://bucket/cli/index.parquet",
                                       "--executor", "serial", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "s3://bucket/cli/index.parquet: 3 rows (3 read" in result.output
    ix = open_index("s3://bucket/cli/index.parquet")
    assert ix.paths() == [f"s3://bucket/speech/f{i}.{'wav' if i % 2 else 'flac'}" for i in (1, 2, 3)]


# ---------------------------------------------------------------------------
# Writers' output and `render --out` on S3
# ---------------------------------------------------------------------------


def _render_cli(*args):
    from click.testing import CliRunner

    from audiotree.cli import cli

    result = CliRunner().invoke(cli, ["render", *map(str, args)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


@pytest.mark.parametrize("fmt", ["tree", "audio"])
def test_s3_render_out_equals_local_render(s3, tmp_path, monkeypatch, fmt):
    from audiotree.sources import open_render

    monkeypatch.setenv("AUDIOTREE_CACHE", str(tmp_path / "cache"))
    sources = [f"{g}={s3['local'] / g}" for g in ("speech", "music")]
    common = [*sources, "--format", fmt, "--part-size", "4", "--batch-size", "3", "--duration", "0.25",
              "--sample-rate", "8000"]
    url = f"s3://bucket/renders/{fmt}"
    _render_cli(*common, "--out", url, "-n", "6")
    out = _render_cli(*common, "--out", url, "-n", "10")  # resumed from the record on S3
    assert "Resuming at item 6" in out
    _render_cli(*common, "--out", tmp_path / "local", "-n", "10")
    names = sorted(p.rsplit("/", 1)[-1] for p in s3["fs"].ls(f"bucket/renders/{fmt}", refresh=True))
    assert names == ["part-00000", "part-00001", "part-00002", "part-00003", "render.json"]  # [0,4) [4,6) [6,8) [8,10)
    remote, local = open_render(url), open_render(tmp_path / "local")
    assert len(remote) == len(local) == 10
    for i in range(10):
        a, b = remote[i], local[i]
        np.testing.assert_array_equal(np.asarray(a.waveform), np.asarray(b.waveform))
        assert a.filepath == b.filepath and a.source == b.source
    # --overwrite removes the previous parts on S3 and starts again.
    _render_cli(*common, "--out", url, "-n", "3", "--overwrite")
    assert sorted(p.rsplit("/", 1)[-1] for p in s3["fs"].ls(f"bucket/renders/{fmt}", refresh=True)) == ["part-00000", "render.json"]
    assert len(open_render(url)) == 3


def test_open_render_missing_url_names_it(s3, tmp_path, monkeypatch):
    from audiotree.sources import open_render

    monkeypatch.setenv("AUDIOTREE_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match=r"s3://bucket/no-render"):
        open_render("s3://bucket/no-render")


def _writer_and_reader(kind):
    from audiotree.sources import AudioDataSource, TreeDataSource, open_arrayrecord
    from audiotree.writers import ArrayRecordWriter, AudioWriter, TreeWriter

    if kind == "tree":
        return (lambda d, **kw: TreeWriter(d, **kw).open()), (lambda d: grain.MapDataset.source(TreeDataSource(d)))
    if kind == "audio":
        return AudioWriter, (lambda d: grain.MapDataset.source(AudioDataSource(d)))
    return (lambda d, **kw: ArrayRecordWriter(d, records_per_shard=3, **kw)), open_arrayrecord


@pytest.mark.parametrize("kind", ["tree", "audio", "arrayrecord"])
def test_s3_writer_output_equals_local_output(s3, tmp_path, kind):
    from audiotree.core import AudioTree
    from audiotree.writers.remote import fetch_folder

    ds = create_audio_dataset(str(s3["local"] / "speech"), duration=0.25, sample_rate=8000, shuffle=False)
    batch = AudioTree.batch([ds[i] for i in range(len(ds))])
    make, read = _writer_and_reader(kind)
    url = f"s3://bucket/writers/{kind}"
    for target in (url, tmp_path / "local"):
        writer = make(target)
        writer.write(batch)
        writer.close()
    with pytest.raises(FileExistsError, match=rf"s3://bucket/writers/{kind} already holds"):
        make(url)
    remote = read(fetch_folder(url, cache_dir=tmp_path / "cache"))
    local = read(tmp_path / "local")
    assert len(remote) == len(local) == len(ds)
    for i in range(len(ds)):
        np.testing.assert_array_equal(np.asarray(remote[i].waveform), np.asarray(local[i].waveform))
    # Replacing it (exist_ok) leaves none of the old dataset's files behind.
    writer = make(url, exist_ok=True)
    writer.write(AudioTree.batch([ds[0]]))
    writer.close()
    assert len(read(fetch_folder(url, cache_dir=tmp_path / "cache"))) == 1


# ---------------------------------------------------------------------------
# S3 through a fault-injecting proxy
# ---------------------------------------------------------------------------


class _FaultProxy(LoopbackServer):
    """An HTTP proxy 127.0.0.1 -> moto that fails every ``every``-th request (503, 500, or a reset, in turn).

    Deterministic (a count, not a random share), so a test cannot pass by luck;
    with ``every >= 2`` no request fails twice in a row, so bounded retries
    always get through; ``every=0`` injects none. Each request is forwarded on
    a fresh connection, and ``log`` records ``(method, path, Range, body
    bytes)`` of each forwarded one (requests and bytes measured at the server side).
    """

    def __init__(self, target_port: int, every: int) -> None:
        self.every, self.requests, self.faults, self.lock = every, 0, {"503": 0, "500": 0, "reset": 0}, threading.Lock()
        self.log: list[tuple[str, str, str, int]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _forward(self) -> None:
                body = request_body(self)
                with proxy.lock:
                    proxy.requests += 1
                    n = proxy.requests
                if proxy.every and n % proxy.every == 0:
                    kind = ("503", "500", "reset")[(n // proxy.every) % 3]
                    with proxy.lock:
                        proxy.faults[kind] += 1
                    if kind == "reset":
                        self.connection.shutdown(socket.SHUT_RDWR)
                        self.close_connection = True
                        return
                    self.send_response(int(kind))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                resp, data = forward(self, target_port, request_headers(self), body)
                with proxy.lock:
                    proxy.log.append((self.command, self.path.split("?")[0], self.headers.get("Range") or "",
                                      len(data) if self.command != "HEAD" else 0))
                send_head(self, resp, data)
                if self.command != "HEAD":
                    try:
                        self.wfile.write(data)
                    except (BrokenPipeError, ConnectionResetError):
                        # The client stopped waiting (gcsfs races an object lookup against a prefix
                        # listing and drops the loser); the request still reached the server.
                        self.close_connection = True

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self.serve(Handler)


@pytest.mark.slow
def test_s3_transient_faults_through_a_proxy_leave_the_stream_unchanged(s3, monkeypatch):
    import s3fs

    def stream():
        ds = create_balanced_audio_dataset(
            sources={"speech": ["s3://bucket/speech"], "music": ["s3://bucket/music"]},
            sample_rate=16000, duration=0.5, num_epochs=None,
        )
        it = iter(ds.to_iter_dataset(SYNC))
        return _keys([next(it) for _ in range(12)])

    clean = stream()
    proxy = _FaultProxy(int(s3["endpoint"].rsplit(":", 1)[1]), every=3)
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        s3fs.S3FileSystem.clear_instance_cache()
        faulty = stream()
    finally:
        proxy.stop()
        s3fs.S3FileSystem.clear_instance_cache()
    assert all(count > 0 for count in proxy.faults.values()), proxy.faults
    assert faulty == clean
