"""Read-ahead along the known order (issue 39): the same items, fewer requests, resumable, fault-proof.

A corpus of WAV (PCM), FLAC (the ``flac`` tool), MP3 (``lame``) and Ogg (``oggenc``) files is served over HTTP with
Range by a server on 127.0.0.1 that counts requests, and indexed over its URLs; every dataset is compared item for
item with the same dataset read without read-ahead (``Corpus(read_ahead=None)``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grain
import numpy as np
import pytest
import soundfile

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "io"))
from test_storage import _handler, _State  # noqa: E402 (the storage tests' counting Range server)

from servers import LoopbackServer  # noqa: E402
from audiotree.index import build_index  # noqa: E402
from audiotree.io import read_ahead  # noqa: E402
from audiotree.sources import Corpus, ReadAhead, create_audio_dataset  # noqa: E402
from audiotree.sources.read_ahead_map import OrderShape  # noqa: E402

SYNC = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


def _tone(seconds: float, rate: int, channels: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    x = 0.3 * np.sin(2 * np.pi * (200 + 50 * seed) * t) + 0.05 * rng.standard_normal(t.size)
    return np.repeat(x[:, None], channels, axis=1).astype(np.float32)


def _write_corpus(folder: Path) -> dict[str, bytes]:
    """Files written by the tools users use; returns ``{name: bytes}``."""
    files = {}
    for i, (rate, channels) in enumerate([(16000, 1), (44100, 2), (22050, 1), (48000, 2)]):
        wav = folder / f"w{i}.wav"
        soundfile.write(wav, _tone(12 + 3 * i, rate, channels, i), rate, subtype="PCM_16")
        files[wav.name] = wav.read_bytes()
        flac = folder / f"f{i}.flac"
        subprocess.run(["flac", "-s", "-f", "-o", str(flac), str(wav)], check=True)
        files[flac.name] = flac.read_bytes()
        # (m0, 16 kHz: MPEG-2, and m1, 44.1 kHz: MPEG-1, get seek tables; m2, MPEG-1 with CRC, none)
        if shutil.which("lame") and i < 3:
            mp3 = folder / f"m{i}.mp3"
            crc = ["-p", "--resample", "44.1"] if i == 2 else []
            subprocess.run(["lame", "--quiet", "-b", "128", *crc, str(wav), str(mp3)], check=True)
            files[mp3.name] = mp3.read_bytes()
        if shutil.which("oggenc") and i % 2 == 1:
            ogg = folder / f"o{i}.ogg"
            subprocess.run(["oggenc", "-Q", "-q", "4", "-o", str(ogg), str(wav)], check=True)
            files[ogg.name] = ogg.read_bytes()
    return files


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The corpus on a counting HTTP Range server, and an index over its URLs."""
    if not shutil.which("flac"):
        pytest.skip("the flac tool is not installed")
    folder = tmp_path_factory.mktemp("corpus")
    files = _write_corpus(folder)
    state = _State()
    server = LoopbackServer()
    server.serve(_handler(state))
    base = f"http://127.0.0.1:{server.port}"
    state.objects.update({f"/c/{name}": data for name, data in files.items()})
    try:
        index = folder / "remote.parquet"
        build_index([f"{base}/c/{name}" for name in sorted(files)], str(index), executor="serial",
                    show_progress=False)
        state.local_index = str(folder / "local.parquet")  # the same files read from local disk
        build_index([str(folder / name) for name in sorted(files)], state.local_index, executor="serial",
                    show_progress=False)
        yield state, str(index)
    finally:
        server.stop()


def _dataset(index: str, ahead, **kwargs):
    return create_audio_dataset(corpus=Corpus(index=index, on_stale="trust", read_ahead=ahead), duration=1.0,
                                sample_rate=16000, num_epochs=None, **kwargs)


def _items(ds, n: int, options=SYNC):
    it = iter(ds.to_iter_dataset(options))
    out = [next(it) for _ in range(n)]
    return [(t.filepath[0], float(t.offset[0]), np.asarray(t.waveform)) for t in out]


def _same(a, b):
    assert [x[:2] for x in a] == [x[:2] for x in b]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x[2], y[2])


def test_the_corpus_has_mp3s_with_and_without_a_seek_table(served):
    """So the comparisons below cover both MP3 reads: by the index's seek table (MPEG-1, MPEG-2), and from the
    start (CRC-protected MPEG-1)."""
    from audiotree.index import open_index

    _, index = served
    rows = {r["path"].rsplit("/", 1)[1]: r["seek_points"]
            for r in open_index(index, columns=["path", "seek_points"]).table.to_pylist()}
    if "m1.mp3" not in rows:
        pytest.skip("lame is not installed")
    assert rows["m1.mp3"] is not None and rows["m0.mp3"] is not None and rows["m2.mp3"] is None


def test_the_order_shape_continues_strides_and_runs():
    shape = OrderShape(span=8)
    for i in (2, 5, 8, 11):
        shape.note(i)
    assert shape.upcoming(2) == [14, 17]
    shape = OrderShape(span=8)
    for i in (7, 3, 9, 1, 5):  # out of order, as reader threads bring them
        shape.note(i)
    assert shape.upcoming(2) == [11, 13]
    assert OrderShape().upcoming(4) == []  # nothing seen: no shape


def test_items_are_the_same_and_requests_fewer(served):
    state, index = served
    local = _items(_dataset(state.local_index, ReadAhead()), 40)  # (a local corpus plans nothing)
    state.reset_counters()
    plain = _items(_dataset(index, None), 40)
    assert [x[0].rsplit("/", 1)[1] for x in plain] == [x[0].rsplit("/", 1)[1] for x in local]
    assert [x[1] for x in plain] == [x[1] for x in local]
    for x, y in zip(plain, local):
        np.testing.assert_array_equal(x[2], y[2])
    plain_requests = state.requests
    read_ahead.close_stores()
    state.reset_counters()
    ahead = _items(_dataset(index, ReadAhead(items=16)), 40)
    ahead_requests = state.requests
    _same(plain, ahead)
    # Measured here: 161 requests without, 52 with (the first items come before the order's shape is known).
    assert ahead_requests <= 0.5 * plain_requests, (ahead_requests, plain_requests)
    hits = read_ahead.active_stores()[0]
    assert hits.stats()["bytes"] <= ReadAhead(items=16).cache_bytes



@pytest.mark.slow
def test_grain_workers_and_threads_give_the_same_items(served):
    """0 workers and 0 threads against 2 mp_prefetch workers with 8 reader threads each."""
    _, index = served
    plain = _items(_dataset(index, None), 24)
    read_ahead.close_stores()
    ds = _dataset(index, ReadAhead(items=16))
    it = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=8, prefetch_buffer_size=16)).mp_prefetch(
        grain.MultiprocessingOptions(num_workers=2)))
    try:
        got = [next(it) for _ in range(24)]
    finally:
        del it
    _same(plain, [(t.filepath[0], float(t.offset[0]), np.asarray(t.waveform)) for t in got])
    threaded = _items(_dataset(index, ReadAhead(items=16)), 24,
                      grain.ReadOptions(num_threads=8, prefetch_buffer_size=16))
    _same(plain, threaded)


def test_a_checkpoint_mid_epoch_resumes_exactly(served):
    _, index = served
    ds = _dataset(index, ReadAhead(items=8))
    it = iter(ds.to_iter_dataset(SYNC))
    for _ in range(10):
        next(it)
    state = it.get_state()
    rest = [next(it) for _ in range(10)]
    read_ahead.close_stores()
    again = iter(_dataset(index, ReadAhead(items=8)).to_iter_dataset(SYNC))
    again.set_state(state)
    resumed = [next(again) for _ in range(10)]
    _same([(t.filepath[0], float(t.offset[0]), np.asarray(t.waveform)) for t in rest],
          [(t.filepath[0], float(t.offset[0]), np.asarray(t.waveform)) for t in resumed])


def test_faults_on_a_third_of_requests_leave_the_stream_unchanged(served, tmp_path):
    """Every third request through the proxy fails (503, 500 or a reset): read-ahead requests that fail are
    dropped, and the item's own read retries; the items equal the fault-free ones."""
    from test_storage import _FaultProxy

    state, index = served
    plain = _items(_dataset(index, None), 16)
    proxy = _FaultProxy(_server_port(index), every=3)
    try:
        proxied = tmp_path / "proxied.parquet"
        urls = [p.replace(f":{_server_port(index)}/", f":{proxy.port}/") for p in _paths(index)]
        build_index(urls, str(proxied), executor="serial", show_progress=False)
        read_ahead.close_stores()
        got = _items(_dataset(str(proxied), ReadAhead(items=16)), 16)
        assert sum(proxy.faults.values()) > 5
    finally:
        proxy.stop()
    assert [x[1] for x in plain] == [x[1] for x in got]
    for x, y in zip(plain, got):
        np.testing.assert_array_equal(x[2], y[2])


def _paths(index: str) -> list[str]:
    import pyarrow.parquet as pq

    return sorted(pq.read_table(index, columns=["path"]).column(0).to_pylist())


def _server_port(index: str) -> int:
    return int(_paths(index)[0].split("/")[2].rsplit(":", 1)[1])


def test_bad_options_are_refused_by_name():
    with pytest.raises(ValueError, match="cache_limit"):
        ReadAhead(cache_limit="lots")
    with pytest.raises(ValueError, match="max_in_flight"):
        ReadAhead(max_in_flight=0)
    with pytest.raises(TypeError, match="read_ahead must be a ReadAhead"):
        Corpus(read_ahead=16)


def _slow_server(state, seconds: float):
    """The counting Range server, answering every request ``server.delay[0]`` s late (``seconds`` at first; so
    read-ahead requests are in flight)."""
    import time

    base = _handler(state)
    delay = [seconds]

    class Slow(base):
        def do_GET(self) -> None:
            time.sleep(delay[0])
            super().do_GET()

    server = LoopbackServer()
    server.serve(Slow)
    server.delay = delay
    return server


_READER = """
import os, sys
import grain
from audiotree.sources import Corpus, ReadAhead, create_audio_dataset
ds = create_audio_dataset(corpus=Corpus(index=sys.argv[1], on_stale="trust", read_ahead=ReadAhead(items=64)),
                          duration=1.0, sample_rate=16000, num_epochs=None)
it = iter(ds.to_iter_dataset(grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)))
for _ in range(int(sys.argv[2])):
    next(it)
print("read", flush=True)
if sys.argv[3] == "wait":
    sys.stdin.readline()  # killed here, its read-ahead in flight
"""


@pytest.mark.slow
def test_a_killed_or_exiting_reader_leaves_no_request_behind(served, tmp_path):
    """The read-ahead runs inside the process that reads (on its storage's IO loop): a process killed with its
    requests in flight leaves nothing that still asks the server, and one that exits mid-read-ahead exits 0 and
    quietly."""
    import os
    import signal
    import time

    _, index = served
    state = _State()
    state.objects.update(served[0].objects)
    slow = _slow_server(state, 0.0)
    try:
        local = tmp_path / "slow.parquet"
        urls = [p.replace(f":{_server_port(index)}/", f":{slow.port}/") for p in _paths(index)]
        build_index(urls, str(local), executor="serial", show_progress=False)
        slow.delay[0] = 0.2  # (the index is built; the reader's requests are the slow ones)
        script = tmp_path / "reader.py"
        script.write_text(_READER)
        env = dict(os.environ)
        proc = subprocess.Popen([sys.executable, str(script), str(local), "6", "wait"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        try:
            assert proc.stdout.readline().strip() == "read"
            asked = state.requests
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        time.sleep(1.0)  # requests the server had already taken end; nothing new may come
        settled = state.requests
        time.sleep(1.0)
        assert state.requests == settled, (asked, settled, state.requests)
        with pytest.raises(ProcessLookupError):
            os.kill(proc.pid, 0)
        # Exiting normally with the read-ahead in flight: code 0, nothing on stderr.
        done = subprocess.run([sys.executable, str(script), str(local), "6", "exit"], capture_output=True, text=True,
                              timeout=120, env=env, cwd=tmp_path)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr[-2000:]
    finally:
        slow.stop()


def test_the_request_budget_spaces_requests_at_its_rate():
    """A token bucket of 5 requests/s, full at first (one second's worth): 10 requests cannot all start in under
    one second. (A lower bound: a budget can only slow requests down.)"""
    import asyncio
    import time

    from audiotree.io.read_ahead import _Budget

    async def take_all() -> list[float]:
        budget = _Budget(5.0)
        stamps = []
        for _ in range(10):
            await budget.take()
            stamps.append(time.monotonic())
        return stamps

    stamps = asyncio.run(take_all())
    assert stamps[-1] - stamps[0] >= 0.9  # 5 from the full bucket, then 5 more at 0.2 s each
    assert all(b >= a for a, b in zip(stamps, stamps[1:]))
