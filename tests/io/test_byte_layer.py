"""The byte layer: every remote read is counted where it is made, and the one bounded cache type behaves.

Servers are real (the storage tests' HTTP server honouring Range, moto's S3
server); the counts are compared with what the HTTP server itself saw.
"""

from __future__ import annotations

import io
import os
import pickle
import signal
import threading

import numpy as np
import pytest
import soundfile
from servers import moto_s3
from test_storage import SECRET, http, http_server  # noqa: F401 - the storage tests' servers

from audiotree.io import AudioFile
from audiotree.io.byte_cache import BoundedCache, EvictionPolicy, FirstInFirstOut
from audiotree.io.byte_counters import byte_counters, reset_byte_counters
from audiotree.io.byte_reads import file_size, read_bytes
from audiotree.io.item_bytes import item_size, read_item_bytes
from audiotree.io.members import tar_url

RANGES = [(0, 10), (10, 4096), (5000, 5001), (65_000, 99_999), (123, 70_000), (99_990, 100_000), (42, 43)]


def _blob() -> bytes:
    return np.random.default_rng(7).integers(0, 256, 100_000, dtype=np.uint8).tobytes()


def test_http_reads_are_counted_exactly_as_the_server_saw_them(http):
    data = _blob()
    http.objects["/blob.bin"] = data
    url = f"{http.base}/blob.bin"
    reset_byte_counters()
    http.reset_counters()
    for lo, hi in RANGES:
        assert read_bytes(url, lo, hi) == data[lo:hi]
    want = sum(hi - lo for lo, hi in RANGES)
    snap = byte_counters()
    assert snap["by_backend"] == {"http": {"requests": len(RANGES), "bytes_fetched": want}}
    assert (snap["requests"], snap["bytes_fetched"]) == (http.requests, http.bytes_sent) == (len(RANGES), want)


def test_a_remote_decode_counts_every_request_it_makes(http):
    audio = (0.1 * np.random.default_rng(1).standard_normal((48_000, 2))).astype(np.float32)
    buf = io.BytesIO()
    soundfile.write(buf, audio, 16_000, format="WAV", subtype="PCM_16")
    http.objects["/tone.wav"] = buf.getvalue()
    reset_byte_counters()
    http.reset_counters()
    with AudioFile(f"{http.base}/tone.wav") as f:
        got = f.read(16_000, 8_000)
    assert got.shape == (8_000, 2)
    snap = byte_counters()
    # Each request the server answered is counted once: the size lookup (no body) and the ranged GETs.
    assert snap["requests"] == http.requests and snap["bytes_fetched"] == http.bytes_sent
    assert snap["requests"] >= 2 and snap["bytes_fetched"] >= 8_000 * 2 * 2


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server holding the bucket ``byte-layer`` (moto's state is per process: a bucket of its own)."""
    with moto_s3(secret=SECRET) as server:
        server.fs.mkdir("byte-layer")
        yield server.fs


def test_s3_reads_are_counted_per_request(s3):
    data = _blob()
    s3.pipe("byte-layer/blob.bin", data)
    url = "s3://byte-layer/blob.bin"
    reset_byte_counters()
    for lo, hi in RANGES:
        assert read_bytes(url, lo, hi) == data[lo:hi]
    assert file_size(url) == len(data)
    snap = byte_counters()
    assert snap["by_backend"] == {"s3": {"requests": len(RANGES) + 1, "bytes_fetched": sum(h - l for l, h in RANGES)}}
    reset_byte_counters()
    assert byte_counters()["requests"] == 0


def test_a_member_with_its_range_is_that_range_of_its_shard(http, tmp_path):
    shard = b"H" * 512 + _blob()[:1000] + b"T" * 24
    http.objects["/s.tar"] = shard
    (tmp_path / "s.tar").write_bytes(shard)
    for container in (f"{http.base}/s.tar", str(tmp_path / "s.tar")):
        member = tar_url(container, "a.wav", 512, 1000)
        reset_byte_counters()
        assert read_item_bytes(member, 10, 20) == shard[522:532]
        assert read_item_bytes(member, 990, None) == shard[1502:1512]  # stops at the member's end
        assert item_size(member) == 1000
        # Remote: two ranged GETs and the shard's metadata lookup (its version, for the member's stat).
        assert byte_counters()["requests"] == (3 if container.startswith("http") else 0)


def test_the_cache_counts_hits_and_misses_under_its_name():
    reset_byte_counters()
    cache = BoundedCache("test_counted", max_entries=2)
    cache.put("a", b"x")
    cache.get("a"), cache.get("b"), cache.get("a")
    assert byte_counters()["by_cache"]["test_counted"] == {"hits": 2, "misses": 1}
    assert cache.stats() == {"entries": 1, "bytes": 0, "hits": 2, "misses": 1}


def test_the_cache_is_bounded_in_entries_and_bytes():
    cache = BoundedCache("test_bytes", max_entries=10, max_bytes=100)
    for k in range(5):
        cache.put(k, b"x" * 40)
    assert sorted(cache.keys()) == [3, 4] and cache.nbytes == 80
    cache.put("big", b"y" * 500)  # alone over the limit: kept until the next entry comes
    assert cache.keys() == ["big"]
    cache.put("small", b"z")
    assert cache.keys() == ["small"]


def test_lru_keeps_what_is_read_and_fifo_does_not():
    for policy, kept in ((None, ["a", "c"]), (FirstInFirstOut, ["b", "c"])):
        cache = BoundedCache("test_policy", max_entries=2, **({"policy": policy} if policy else {}))
        cache.put("a", 1); cache.put("b", 2); cache.get("a"); cache.put("c", 3)
        assert sorted(cache.keys()) == kept


class _NextUse(EvictionPolicy):
    """Evicts the key whose next use in a known order is furthest away (what read-ahead along the order needs)."""

    order = ["a", "b", "c", "a", "b", "d", "a"]

    def __init__(self):
        self.keys, self.at = set(), 0

    def added(self, key):
        self.keys.add(key)
        self.at += 1

    def used(self, key):
        self.at += 1

    def removed(self, key):
        self.keys.discard(key)

    def victim(self):
        rest = self.order[self.at:]
        return max(self.keys, key=lambda k: rest.index(k) if k in rest else len(rest))

    def clear(self):
        self.keys.clear()


def test_an_eviction_policy_plugs_in():
    cache = BoundedCache("test_next_use", max_entries=2, policy=_NextUse)
    cache.put("a", 1); cache.put("b", 2); cache.put("c", 3)  # c is never used again; a and b are, soon
    assert sorted(cache.keys()) == ["a", "b"]
    lru = BoundedCache("test_lru", max_entries=2)
    lru.put("a", 1); lru.put("b", 2); lru.put("c", 3)
    assert sorted(lru.keys()) == ["b", "c"]  # what the default policy keeps instead


def test_pickling_leaves_the_entries_and_lock_behind():
    cache = BoundedCache("test_pickle", max_entries=3, max_bytes=1000, policy=FirstInFirstOut)
    cache.put("a", b"123")
    cache.get("a")
    copy = pickle.loads(pickle.dumps(cache))
    assert len(copy) == 0 and copy.stats() == {"entries": 0, "bytes": 0, "hits": 0, "misses": 0}
    assert (copy.name, copy.max_entries, copy.max_bytes, copy.policy) == ("test_pickle", 3, 1000, FirstInFirstOut)
    copy.put("b", b"4")
    assert copy.get("b") == b"4" and cache.get("b") is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_is_not_blocked_by_a_lock_a_parent_thread_held():
    cache = BoundedCache("test_fork", max_entries=4)
    cache.put("a", 1)
    held, release = threading.Event(), threading.Event()

    def hold():
        with cache._lock:  # a reader thread inside the cache at the moment of the fork
            held.set()
            release.wait(30)

    reset_byte_counters()
    cache.get("a")  # counted in the parent, before the thread takes the lock
    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: it must neither block on the held lock nor report the parent's counts
        signal.alarm(20)
        ok = cache.get("a") == 1 and byte_counters()["cache_hits"] == 1
        cache.put("b", 2)
        os._exit(0 if ok and cache.get("b") == 2 else 1)
    release.set()
    thread.join()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
