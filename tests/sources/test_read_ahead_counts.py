"""The read-ahead's requests, hits and waits reach ``audiotree.io.read_stats()``: its fetches on the event loop are
counted like the reader's own requests, and the time a reader blocks on a block fetched ahead is wait time."""

from __future__ import annotations

from test_read_ahead import _dataset, _items, _server_port, served  # noqa: F401 - the counting server and its index

from audiotree.io import read_ahead, read_stats, reset_read_stats
from audiotree.sources import ReadAhead
from helpers import read_ahead_counts


def test_read_ahead_requests_hits_and_waits_are_in_read_stats(served):  # noqa: F811
    state, index = served
    read_ahead.close_stores()
    ds = _dataset(index, ReadAhead(items=16))
    state.reset_counters()
    reset_read_stats()
    _items(ds, 24)
    stores = read_ahead.active_stores()
    read_ahead.close_stores()  # cancels what is still in flight: a cancelled fetch is counted by the client only
    stats = read_stats()
    assert stats.by_backend["http"].requests == stats.requests > 0
    # The server counts a request on arrival and its bytes as it sends them; a fetch cancelled by the close is
    # counted by the client, without the bytes it did not receive, even when it never reached the server.
    assert state.requests <= stats.requests and stats.bytes <= state.bytes_sent, (stats, state.requests)
    assert stats.cache_hits > 0
    store_wait = sum(store.wait_seconds for store in stores)
    assert stats.wait_seconds >= store_wait > 0  # the readers' waits on blocks fetched ahead are in


def test_reads_the_read_ahead_did_not_foresee_are_its_misses(served):  # noqa: F811
    """Items read in an order without a shape are planned by nothing: each of the reader's own requests follows a
    read-ahead miss, and the misses are in ``read_stats().cache_misses``."""
    state, index = served
    read_ahead.close_stores()
    ds = _dataset(index, ReadAhead(items=16))
    state.reset_counters()
    reset_read_stats()
    for i in (41, 3, 29, 17, 8):  # no period, no step: nothing to plan
        ds[i]
    stats = read_stats()
    read_ahead.close_stores()
    assert stats.requests == state.requests > 0
    assert stats.cache_misses >= stats.requests, stats


def test_members_of_a_remote_tar_shard_are_read_from_their_plans(served, tmp_path):  # noqa: F811
    """A WAV member of a shard is read through the member reader (its first fetch of 32 KiB, a margin before a
    seek): its plan covers those reads, so once the order is known every read is a read-ahead hit."""
    import io
    import tarfile

    from audiotree.index import build_index

    state, remote_index = served
    shard = io.BytesIO()
    with tarfile.open(fileobj=shard, mode="w") as tar:
        for path, data in sorted(state.objects.items()):
            if path.endswith(".wav"):
                info = tarfile.TarInfo(path.rsplit("/", 1)[1])
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    state.objects["/shards/wav.tar"] = shard.getvalue()
    port = _server_port(remote_index)
    index = str(tmp_path / "shard.parquet")
    build_index([f"http://127.0.0.1:{port}/shards/wav.tar"], index, executor="serial", show_progress=False)
    read_ahead.close_stores()
    counts = read_ahead_counts(_dataset(index, ReadAhead(items=16)), warm=8, upto=40)
    assert counts["hits"] > 0 and counts["misses"] == 0, counts
