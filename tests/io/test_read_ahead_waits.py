"""A read takes the blocks it needs from the read-ahead's store and waits for no other request in flight; reads of
an array's rows outside the plans never widen its plans to the object's start.

A render's rows are planned block after block, so a part's blocks form one contiguous run up to the newest request;
a read of one row must not wait for the rows planned after it (it did: every read waited a round trip for the
newest block, and the render read at a tenth of its local rate over HTTP).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fsspec
import pytest

from audiotree.io.read_ahead import PlannedRange, RangeStore, ReadAhead
from counted_http import answer_range

DATA = bytes(range(256)) * 2048  # 512 KiB
HELD_FROM = 8192  # a GET starting here is answered only once the test releases it


@pytest.fixture()
def held_server():
    release, answered = threading.Event(), threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            if self.headers.get("Range", "").startswith(f"bytes={HELD_FROM}-"):
                release.wait(15)
                answered.set()
            answer_range(self, DATA, body=True, ranges=True)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/part.bin", release, answered
    finally:
        release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _two_blocks(url: str) -> RangeStore:
    """A store holding two contiguous blocks of ``url``, as a render's consecutive items are planned: the second
    stays in flight until the server is released."""
    fs = fsspec.filesystem("http", skip_instance_cache=True)
    store = RangeStore(ReadAhead(merge_gap=0))
    store.plan([PlannedRange(url, 0, HELD_FROM, len(DATA), fs)], use=0)
    store.plan([PlannedRange(url, HELD_FROM, len(DATA), len(DATA), fs)], use=1)
    return store


def test_a_read_does_not_wait_for_the_next_block_in_flight(held_server):
    url, release, answered = held_server
    store = _two_blocks(url)
    try:
        assert store.stats()["blocks"] == 2
        got = store.take(url, 100, 4196)  # inside the first block: it needs nothing of the second
        assert got == DATA[100:4196]
        assert not answered.is_set(), "the read waited for the next block's request"
        # A read across both blocks waits for the second and joins them.
        release.set()
        assert store.take(url, 8000, 9000) == DATA[8000:9000]
    finally:
        release.set()
        store.close()


def test_past_what_it_needs_a_read_takes_only_blocks_that_arrived(held_server):
    url, release, answered = held_server
    store = _two_blocks(url)
    try:
        got = store.take(url, 4000, 12000, need=5000)
        assert got == DATA[4000:HELD_FROM]  # the first block's bytes, without waiting for the second
        assert not answered.is_set()
    finally:
        release.set()
        store.close()


@pytest.mark.parametrize("rows", [True, False])
def test_reads_outside_the_plans_widen_a_decoded_object_only(held_server, rows):
    """Two reads before every planned block of an object, past its header: for an audio file, a decoder reading on
    from its start (its later plans start at byte 0: an MP3 without a seek table); for an array read by rows (a
    render's part, ``rows=True``), only items planned too late, and its plans stay as asked."""
    url, release, _ = held_server
    release.set()
    fs = fsspec.filesystem("http", skip_instance_cache=True)
    store = RangeStore(ReadAhead(merge_gap=0))
    size = len(DATA)
    try:
        store.plan([PlannedRange(url, 400_000, 450_000, size, fs, rows=rows)], use=10)
        for start in (100_000, 200_000):
            assert store.take(url, start, start + 1000) is None  # not held: the caller's own request
        store.plan([PlannedRange(url, 450_000, 500_000, size, fs, rows=rows)], use=11)
        held = store.stats()["bytes"]
        assert held == (100_000 if rows else 50_000 + 500_000 + size // 20 - 50_000)
        assert store.take(url, 460_000, 470_000) == DATA[460_000:470_000]
    finally:
        store.close()


def test_a_view_of_a_held_block_is_its_bytes_uncopied(held_server):
    """``take(view=True)`` (a render's rows, copied once into the item's array by its reader) hands out the block's
    bytes as a read-only memoryview; without ``view`` they are bytes of their own, as before."""
    url, release, _ = held_server
    release.set()
    fs = fsspec.filesystem("http", skip_instance_cache=True)
    store = RangeStore(ReadAhead(merge_gap=0))
    try:
        store.plan([PlannedRange(url, 0, 100_000, len(DATA), fs, rows=True)], use=0)
        got = store.take(url, 1000, 50_000, view=True)
        assert isinstance(got, memoryview) and got.readonly and got == DATA[1000:50_000]
        copied = store.take(url, 1000, 50_000)
        assert isinstance(copied, bytes) and copied == DATA[1000:50_000]
    finally:
        store.close()
